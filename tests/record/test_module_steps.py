"""The light pass's module-call step (perfdoctor.record.bootstrap.steps.ModuleSteps): after
its scout, submodule calls are back on torch's own ``Module.__call__`` (issue 29 item 6,
"the light pass disturbs nothing"), and the step still has one entry per forward."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path

import torch

from perfdoctor import api
from perfdoctor.record.bootstrap.clock import Timer
from perfdoctor.record.bootstrap.steps import ModuleSteps

ROOT = Path(__file__).parents[2]
TORCH_CALL = torch.nn.Module.__call__


class Leaf(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = Leaf(), Leaf()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


class Loss(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum()


def entries(steps: ModuleSteps) -> dict[str, dict[str, int]]:
    """Per depth, per step name: the completed calls in the series."""
    series, error = steps.series()
    assert error is None
    return {depth: {name: len(s["gpu_end_ns"]) for name, s in names.items()} for depth, names in series.items()}


def test_after_the_scout_only_the_depth0_classes_go_through_perfdoctor() -> None:
    net, loss, x = Net(), Loss(), torch.zeros(2)
    steps = ModuleSteps(types.SimpleNamespace(timer=Timer()))
    try:
        forwards = ModuleSteps.SCOUT_CALLS + 7
        for i in range(forwards):
            if i < ModuleSteps.SCOUT_CALLS:
                assert torch.nn.Module.__call__ is not TORCH_CALL  # still scouting
            assert loss(net(x)).item() == 6 * 2  # six Leaf calls on two elements: the calls still compute what torch computes
        # torch's own __call__ for every module but the two depth-0 classes...
        assert torch.nn.Module.__call__ is TORCH_CALL
        assert type(net.blocks[0]).__call__ is TORCH_CALL and type(net.blocks[0].a).__call__ is TORCH_CALL
        assert "__call__" in vars(Net) and "__call__" in vars(Loss)
        counts = entries(steps)
        # ...which still give one entry per call, each forward and each loss
        assert counts["0"] == {"Net.forward": forwards, "Loss.forward": forwards}
        # depth 1 stopped at the scout: a Block entry per block call of the scouting forwards
        assert counts["1"] == {"Block.forward": 3 * ModuleSteps.SCOUT_CALLS}
        assert steps.classes["Net.forward"].endswith("test_module_steps.Net")
        outer = Net()  # a step class called inside a step is not a step of its own
        outer.inner = Net()
        outer.forward = lambda x: outer.inner(x)  # type: ignore[method-assign]
        outer(x)
        assert entries(steps)["0"]["Net.forward"] == forwards + 1
    finally:
        steps.uninstall()
    assert torch.nn.Module.__call__ is TORCH_CALL
    assert "__call__" not in vars(Net) and "__call__" not in vars(Loss)


def test_a_class_with_its_own_call_gets_it_back_and_subclasses_are_not_timed_as_it() -> None:
    seen: list[str] = []

    class Own(torch.nn.Module):
        def __call__(self, *args, **kwargs):  # a class that defines its own __call__
            seen.append(type(self).__name__)
            return super().__call__(*args, **kwargs)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    class Sub(Own):
        pass

    own_call = Own.__call__
    steps = ModuleSteps(types.SimpleNamespace(timer=Timer()))
    try:
        model = Own()
        for _ in range(ModuleSteps.SCOUT_CALLS):
            model(torch.zeros(1))
        assert Own.__call__ is not own_call  # narrowed onto Own
        Own()(torch.zeros(1))
        Sub()(torch.zeros(1))  # inherits Own's attribute: goes through, but is not Own's step
        assert seen[-2:] == ["Own", "Sub"]  # the class's own __call__ still runs
        counts = entries(steps)["0"]
        assert counts[steps.names[Own]] == ModuleSteps.SCOUT_CALLS + 1 and Sub not in steps.names
    finally:
        steps.uninstall()
    assert Own.__call__ is own_call and vars(Own)["__call__"] is own_call


class Regions:
    """A perfdoctor.api listener: the regions a traced pass's ModuleSteps opens."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def step_start(self, name: str) -> None:
        self.names.append(name)

    def step_end(self, name: str) -> None:
        pass

    def declared(self, name: str) -> None:
        pass


def _traced(mark: dict, calls: list[Callable[[], object]]) -> tuple[list[bool], list[str]]:
    """A traced pass's ModuleSteps given the light pass's ``mark``: per call, whether it
    opened a region; and the regions' names."""
    regions = Regions()
    api.subscribe(regions)
    steps = ModuleSteps(types.SimpleNamespace(timer=Timer()), mark=mark)
    marked = []
    try:
        for call in calls:
            before = len(regions.names)
            call()
            marked.append(len(regions.names) > before)
    finally:
        steps.uninstall()
        api._listeners.remove(regions)
    return marked, regions.names


def test_two_instances_of_one_class_are_told_apart_and_a_traced_pass_marks_the_chosen_one() -> None:
    draft, target, x = Net(), Net(), torch.zeros(2)
    iterations = 4

    def loop() -> None:  # assisted generation's rhythm: the draft 3 times, the target once
        for _ in range(iterations):
            for _ in range(3):
                draft(x)
            target(x)
            Loss()(x)  # a module made anew each time: many instances, each called once

    steps = ModuleSteps(types.SimpleNamespace(timer=Timer()))
    try:
        loop()  # scouting, then narrowed (the draft's fifth call)
        assert torch.nn.Module.__call__ is TORCH_CALL
        series, _ = steps.series()
    finally:
        steps.uninstall()
    # each Net call's instance, by ordinal in order of first call, beside its times
    assert series["0"]["Net.forward"]["instance"] == [1, 1, 1, 2] * iterations
    assert len(series["0"]["Net.forward"]["gpu_end_ns"]) == 4 * iterations
    # one Loss call per instance: no two instances repeat, so the class reads as it always did
    assert "instance" not in series["0"]["Loss.forward"] and len(series["0"]["Loss.forward"]["gpu_end_ns"]) == iterations

    # a traced pass: the same program, the light pass's step the second instance of Net
    draft, target = Net(), Net()
    _, names = _traced({"name": "Net#2.forward", "depth": 0, "instance": 2, "class": f"{Net.__module__}.{Net.__qualname__}"}, [loop])
    assert names == ["Net#2.forward"] * iterations


def test_a_torchscript_module_is_named_after_the_class_it_was_scripted_from() -> None:
    # torch.jit.script / trace make every model a RecursiveScriptModule: named so, two
    # scripted models were one step (rec_jit.py read RecursiveScriptModule.forward)
    net, loss, x = torch.jit.script(Net()), torch.jit.script(Loss()), torch.zeros(2)
    steps = ModuleSteps(types.SimpleNamespace(timer=Timer()))
    try:
        for _ in range(ModuleSteps.SCOUT_CALLS + 3):  # scouting, then narrowed
            loss(net(x))
        counts = entries(steps)["0"]
    finally:
        steps.uninstall()
    assert counts == {"Net.forward": ModuleSteps.SCOUT_CALLS + 3, "Loss.forward": ModuleSteps.SCOUT_CALLS + 3}
    assert steps.classes["Net.forward"] == "torch.jit._script.RecursiveScriptModule"
    # a traced pass marks the chosen one only
    marked, names = _traced({"name": "Net.forward", "depth": 0, "class": "torch.jit._script.RecursiveScriptModule"},
                            [lambda: loss(net(x))] * 3)
    assert marked == [True] * 3 and names == ["Net.forward"] * 3
    # the eager Net called first (torch.jit.trace runs it): its name is taken, and the
    # scripted one keeps its class's name, a step of its own
    eager = Net()
    steps = ModuleSteps(types.SimpleNamespace(timer=Timer()))
    try:
        eager(x)
        for _ in range(ModuleSteps.SCOUT_CALLS + 3):
            net(x)
        counts = entries(steps)["0"]
    finally:
        steps.uninstall()
    assert counts == {"Net.forward": 1, "RecursiveScriptModule.forward": ModuleSteps.SCOUT_CALLS + 3}


def test_classes_made_in_functions_are_named_as_their_users_know_them() -> None:
    # torch.export's ExportedProgram.module() (and fx.symbolic_trace) make a class per
    # module inside GraphModule.__new__: the step read
    # 'GraphModule.__new__.<locals>.GraphModuleImpl.forward'; a model class defined in the
    # script's main() read 'main.<locals>.Net.forward'
    def main_net() -> type:
        class Net(torch.nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return x * 2
        return Net

    def other_net() -> type:
        class Net(torch.nn.Module):  # another class of that name: kept apart by its full name
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return x * 3
        return Net

    exported = torch.export.export(Leaf(), (torch.zeros(2),)).module()
    traced = torch.fx.symbolic_trace(Block())
    first, second, x = main_net()(), other_net()(), torch.zeros(2)
    steps = ModuleSteps(types.SimpleNamespace(timer=Timer()))
    try:
        for _ in range(ModuleSteps.SCOUT_CALLS + 3):
            exported(x), traced(x), first(x), second(x)
        counts = entries(steps)["0"]
    finally:
        steps.uninstall()
    calls = ModuleSteps.SCOUT_CALLS + 3
    assert counts == {"GraphModule.forward": 2 * calls, "Net.forward": calls,
                      f"{type(second).__qualname__}.forward": calls}
    assert "<locals>" in type(second).__qualname__


def test_a_traced_pass_marks_only_the_first_call_of_each_group_the_light_pass_found() -> None:
    # the light pass read the model's calls two per iteration (classifier-free guidance), a
    # stray single call before the loop; a traced pass marks each group's first call, one
    # region per step, and past the light pass's groups goes on two by two
    net, x = Net(), torch.zeros(2)
    mark = {"name": "Net.forward", "depth": 0, "class": f"{Net.__module__}.{Net.__qualname__}", "calls_per_step": 2,
            "groups": [[1, 1], [2, 3]]}
    marked, names = _traced(mark, [lambda: net(x)] * 11)
    assert marked == [True, True, False, True, False, True, False, True, False, True, False]
    assert names == ["Net.forward"] * 6


def test_each_call_notes_its_call_site_and_a_traced_pass_follows_the_groups_by_site() -> None:
    # a continuous-batching loop's rhythm: per iteration a prefill call for each newly
    # admitted request (2 in the first, then one every other iteration), then one decode call
    net, x = Net(), torch.zeros(2)
    admitted = [2, 0, 1, 0, 1, 0, 1, 0]

    def loop() -> None:
        for n in admitted:
            for _ in range(n):
                net(x)  # the prefill's place
            net(x)  # the decode's

    steps = ModuleSteps(types.SimpleNamespace(timer=Timer()))
    try:
        loop()  # scouting, then narrowed: the sites noted on both paths
        series, _ = steps.series()
    finally:
        steps.uninstall()
    prefill, decode = 1, 2  # ordinals by first call
    want = [site for n in admitted for site in [prefill] * n + [decode]]
    assert series["0"]["Net.forward"]["site"] == want and len(series["0"]["Net.forward"]["gpu_end_ns"]) == len(want)
    # a traced pass given the light pass's groups by site (sizes that vary, no calls_per_step):
    # each group's first call, then one call per step past the groups
    mark = {"name": "Net.forward", "depth": 0, "class": f"{Net.__module__}.{Net.__qualname__}", "groups": [[3, 1], [1, 1], [2, 1]]}
    marked, _ = _traced(mark, [lambda: net(x)] * 8)
    assert marked == [True, False, False, True, True, False, True, True]


def test_each_call_notes_its_grad_mode_and_a_traced_pass_marks_the_chosen_modes_calls() -> None:
    # training calls, then an evaluation under no_grad, twice: the mode noted on the
    # scouting path and after narrowing; one mode only: nothing noted
    net, x = Net(), torch.zeros(2)
    want = ([True] * 4 + [False] * 2) * 2

    def loop() -> None:
        for grad in want:
            with torch.set_grad_enabled(grad):
                net(x)

    steps = ModuleSteps(types.SimpleNamespace(timer=Timer()))
    try:
        loop()
        series, _ = steps.series()
    finally:
        steps.uninstall()
    assert series["0"]["Net.forward"]["grad"] == want
    steps = ModuleSteps(types.SimpleNamespace(timer=Timer()))
    try:
        for _ in range(8):
            net(x)
        series, _ = steps.series()
    finally:
        steps.uninstall()
    assert "grad" not in series["0"]["Net.forward"]
    # a traced pass told the steps are the grad-enabled calls marks those alone
    def call(grad: bool) -> None:
        with torch.set_grad_enabled(grad):
            net(x)

    marked, _ = _traced({"name": "Net.forward", "depth": 0, "class": f"{Net.__module__}.{Net.__qualname__}", "grad": True},
                        [functools.partial(call, grad) for grad in want])
    assert marked == want


def test_each_call_notes_whether_it_took_another_window_of_the_last_calls_input() -> None:
    # per image 4 crops of one shape (views at other places), on the scouting path and after
    # narrowing; each image made and freed in turn, so the next may take its memory; under
    # inference_mode (views without a _base) too
    net = Net()

    def image(mode: object) -> None:
        with mode:
            img = torch.randn(1, 8, 8)
            for y in (0, 4):
                for x in (0, 4):
                    net(img[:, y:y + 4, x:x + 4])

    steps = ModuleSteps(types.SimpleNamespace(timer=Timer()))
    try:
        for mode in [torch.no_grad(), torch.inference_mode()] * 2:
            image(mode)
        series, _ = steps.series()
    finally:
        steps.uninstall()
    assert series["0"]["Net.forward"]["window"] == [False, True, True, True] * 4
    # one tensor every call (a benchmark), slices of one buffer of another shape first (a
    # decode loop's prefill, then its tokens) and fresh tensors: windows only where the
    # slices' shape holds; none at all, or with grad enabled (truncated backpropagation
    # through time trains one window per iteration), nothing noted
    x, tokens = torch.zeros(2), torch.zeros(1, 12)
    steps = ModuleSteps(types.SimpleNamespace(timer=Timer()))
    try:
        with torch.no_grad():
            for t in [x, x, x, tokens[:, 0:4], tokens[:, 4:5], tokens[:, 5:6], torch.zeros(2), torch.zeros(2)]:
                net(t)
        series, _ = steps.series()
    finally:
        steps.uninstall()
    assert series["0"]["Net.forward"]["window"] == [False] * 5 + [True, False, False]
    for inputs in ([x] * 8, [tokens[:, i:i + 1] for i in range(8)]):
        steps = ModuleSteps(types.SimpleNamespace(timer=Timer()))
        try:
            for t in inputs:
                net(t)
            series, _ = steps.series()
        finally:
            steps.uninstall()
        assert "window" not in series["0"]["Net.forward"]


def test_perfdoctor_run_of_an_unmodified_program_finds_one_step_per_forward(tmp_path: Path) -> None:
    """The real thing: image_infer.py (10 forwards of a tiny ResNet-18) under `perfdoctor run`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    program = ROOT / "tests" / "programs" / "real" / "image_infer.py"
    args = ["--device", "cpu", "--model", "resnet18", "--batch", "1", "--img-size", "32", "--warmup", "3", "--iters", "9"]
    done = subprocess.run([sys.executable, "-m", "perfdoctor.record.run", "--quiet", "--out", str(tmp_path / "runs"),
                           "--collect", "torch", str(program), *args], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (bundle,) = (tmp_path / "runs").iterdir()
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    assert light["step_name"] == "ResNet.forward" and light["module"]["depth"] == 0
    assert light["steps_seen"] == 3 + 9
