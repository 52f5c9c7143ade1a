import sys, time, msgspec
from typing import Union
from itertools import compress
from perfdoctor.collectors import kineto_events as ke
raw = open(sys.argv[1],'rb').read()
sliced = ke.array_slices(raw, "traceEvents")
spans = sliced.spans(9)
import gc; gc.disable()
texts=[]
class Cap:
    def decode(self, b): texts.append(bytes(b)); return []
for _ in sliced.decoded(Cap(), span=spans[1]): pass
Scalar=ke.Scalar
class C2(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    cat: str = ""; name: str = ""; ts: Scalar = None; dur: Scalar = None; pid: Scalar = None; tid: Scalar = None
    args: msgspec.Raw = msgspec.field(default=ke._NO_RAW)
class OpArgs(msgspec.Struct, gc=False):
    input_dims: msgspec.Raw = msgspec.field(default=ke._NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=ke._NO_RAW, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=ke._NO_RAW, name="Concrete Inputs")
d_cur = ke.events_decoder
d_raw = msgspec.json.Decoder(list[Union[(C2, ke._Metadata, *ke._skipped)]])
d_args = msgspec.json.Decoder(list[ke.Args])
d_opargs = msgspec.json.Decoder(list[OpArgs])
NEED = {"kernel","gpu_memcpy","gpu_memset","cuda_runtime","cuda_driver"}
for rep in range(4):
    t0=time.process_time()
    for t in texts:
        x = d_cur.decode(t)
        ev = list(compress(x, map(ke._Complete.__instancecheck__, x)))
        a = [e.args for e in ev]
        del x, ev, a
    t1=time.process_time()
    for t in texts:
        x = d_raw.decode(t)
        ev = list(compress(x, map(C2.__instancecheck__, x)))
        need = [e.args for e in ev if e.cat in NEED]
        ops = [e.args for e in ev if e.cat == "cpu_op"]
        a1 = d_args.decode(b"[" + b",".join(need) + b"]")
        a2 = d_opargs.decode(b"[" + b",".join(ops) + b"]")
        del x, ev, a1, a2, need, ops
    t2=time.process_time()
    print(f"current {t1-t0:.4f}  raw+batch {t2-t1:.4f}")
