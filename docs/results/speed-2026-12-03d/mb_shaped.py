import pickle, sys, time
from perfdoctor.analysis import bounds
for f in sys.argv[1:]:
    p = pickle.load(open(f, "rb"))
    t = time.process_time(); a = bool(bounds.shaped_ops(p.ops).any()); t1 = time.process_time()
    b = bounds.any_shaped(p.ops) if hasattr(bounds, "any_shaped") else None; t2 = time.process_time()
    print(f, a, b, f"shaped_ops.any {1000*(t1-t):.2f} ms any_shaped {1000*(t2-t1):.2f} ms")
