import sys, time, msgspec
from typing import Union, ClassVar, Any
from perfdoctor.collectors import kineto_events as ke
import gc; gc.disable()
raw = open(sys.argv[1],'rb').read()
sliced = ke.array_slices(raw, "traceEvents")
texts=[]
class Cap:
    def decode(self, b): texts.append(bytes(b)); return []
for sp in sliced.spans(9):
    for _ in sliced.decoded(Cap(), span=sp): pass
Scalar, Dims = ke.Scalar, ke.Dims
NR = ke._NO_RAW
class Args2(msgspec.Struct, gc=False):
    device: Scalar = None
    stream: Scalar = None
    correlation: Scalar = None
    registers: Scalar = msgspec.field(default=None, name="registers per thread")
    shared_memory: Scalar = msgspec.field(default=None, name="shared memory")
    grid: Dims = None
    block: Dims = None
    occupancy: Scalar = msgspec.field(default=None, name="est. achieved occupancy %")
    bytes: Scalar = None
    graph_id: Scalar = msgspec.field(default=None, name="graph id")
    input_dims: msgspec.Raw = msgspec.field(default=NR, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=NR, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=NR, name="Concrete Inputs")
    name: Any = None
class C2(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    ph: ClassVar[str] = "X"
    cat: str = ""; name: str = ""; ts: Scalar = None; dur: Scalar = None; pid: Scalar = None; tid: Scalar = None
    args: Union[Args2, None] = None
class M2(msgspec.Struct, gc=False, tag_field="ph", tag="M"):
    ph: ClassVar[str] = "M"
    name: str = ""
    args: Union[Args2, None] = None
d2 = msgspec.json.Decoder(list[Union[(C2, M2, *ke._skipped)]])
d1 = ke.events_decoder
def run(d):
    t=time.process_time()
    for x in texts:
        y = d.decode(x); del y
    return time.process_time()-t
for r in range(3):
    print("current %.1f  reordered %.1f ms" % (min(run(d1) for _ in range(5))*1e3, min(run(d2) for _ in range(5))*1e3))
