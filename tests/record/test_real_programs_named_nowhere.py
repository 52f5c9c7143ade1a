"""Real programs of shapes perfdoctor was not written against (issue 29, "programs named
nowhere", its first five probes), as tests/record/test_real_programs.py runs them: the
light pass's step and time against the program's own timer in the same process; some also
traced, read by ``analyze``. (Split from that file so the suite's two workers share them.)"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REAL_PROGRAMS as REAL, program_result, run_cli_fds
from real_helpers import FETCH, light_run, step_ms, traced_whole, steps_per_s, held_in
from perfdoctor.analysis.steps import find_steps
from perfdoctor.pipeline import diagnose, load_trace
from perfdoctor.record.light import window_start

torch = pytest.importorskip("torch")
# Each test compares a reading with the program's own timer, both from one run. With two test
# workers on two cores, the other worker's load now and then stretches a run's steps or the
# gaps between them (preempted 5-14 ms gaps between ~1 ms steps read as pauses): one of 68
# failed in each of three full suites, a different one each time, every one passing alone.
# A failed assertion runs the test once more, a new run of the program; a wrong reading
# fails both (pytest reports the rerun as R).
pytestmark = pytest.mark.flaky(reruns=1, only_rerun=["AssertionError"])


# Issue 29, "programs named nowhere": shapes perfdoctor was not written against. Each test
# checks the count exactly and the time over the very steps the program timed.


def test_spec_decode_compiled_steps_per_verifying_call_not_per_draft_token(tmp_path: Path) -> None:
    # gpt-fast's speculative decode with --compile: decode_one_token (the draft's k tokens)
    # and model_forward (the target verifying them in one call) are both compiled. Before:
    # the most frequent compiled function, the draft's token, was the step (104 steps of
    # 0.27 ms for 26 iterations of 2.2 ms). model_forward also runs once more on the draft
    # when every draft token was accepted (its cache fill): that call is the same iteration's.
    light, series, result = light_run(
             tmp_path, "spec_decode.py", "--layers", "4", "--draft-layers", "1", "--dim", "64", "--heads", "4", "--kv-heads", "2",
             "--vocab", "256", "--tokens", "32", "--generations", "2", "--speculate-k", "4", "--device", "cpu",
             "--compile", "--compile-backend", "eager",
         )
    assert light["step_name"] == "torch.compile: model_forward"
    assert result["all_accepted"] > 0  # the fill calls are there to be told apart
    assert light["steps_seen"] == result["warmup_iters"] + result["iters"]
    # each iteration from one verify to the next holds the next one's drafts: the same time
    # per iteration as the program's (drafts, then verify); the last of a generation ends at
    # its own end (the next generation's prefills are a pause). 10 %: the iteration also
    # holds the loop's host work between the program's timed calls, which a loaded 2-core
    # box stretches (9 % at load 6, 2026-12-03; within 5 % alone); the draft's token as the
    # step would read a quarter of it
    ms = step_ms(series)[-result["iters"]:]
    assert ms.mean() == pytest.approx(result["ms_per_step"], rel=0.10)


@pytest.mark.extended  # speculative decoding's steps: test_spec_decode_compiled_steps_per_verifying_call_not_per_draft_token
def test_spec_decode_eager_steps_per_target_forward(tmp_path: Path) -> None:
    # eager: two Transformer instances at depth 0, the target's forward (prefill, then one
    # verify per iteration) encloses the draft's; the prefill is a step too (it makes the
    # generation's first token), so one step per generation more than the program's iterations
    light, series, result = light_run(
             tmp_path, "spec_decode.py", "--layers", "4", "--draft-layers", "1", "--dim", "64", "--heads", "4", "--kv-heads", "2",
             "--vocab", "256", "--tokens", "32", "--generations", "2", "--speculate-k", "4", "--device", "cpu",
         )
    assert light["step_name"] == "Transformer#1.forward"
    assert light["steps_seen"] == result["warmup_iters"] + result["iters"] + 1 + 2


def test_diffusion_sampling_steps_per_denoising_step(tmp_path: Path) -> None:
    # a diffusers-style loop: one UNet call per timestep (classifier-free guidance as one
    # doubled batch), the scheduler's math between calls, a text encoder before and a VAE
    # decode after each pipeline call (other modules at depth 0, called less often)
    steps = 8
    light, series, result = light_run(tmp_path, "diffusion_sample.py", "--device", "cpu", "--latent", "16", "--channels", "32",
                                       "--steps", str(steps), "--images", "2")
    assert light["step_name"] == "UNet2DConditionModel.forward" and "calls_per_step" not in light["module"]
    assert light["steps_seen"] == result["warmup_steps"] + result["steps"]
    # each step from one UNet call to the next, against the program's own: all but each
    # pipeline call's last, which runs to the next call's first step unless the VAE decode
    # and text encoding between them read as a pause; on this CPU config they take about
    # one step, so that is a coin toss (55.0 against 51.4 ms once): left out here. Step by
    # step, not summed: on this loaded box one preemption in the untimed sliver between two
    # steps moves a sum (steps of 2 ms to 1.2 s in one run). Before the program's timer held
    # the progress bar's update (tqdm's it/s does), most steps read 5-20 ms longer than its own
    ms, own = step_ms(series)[-result["steps"]:], np.array(result["ms_each"])
    inner = np.arange(result["steps"]) % steps != steps - 1
    assert np.isclose(ms[inner], own[inner], rtol=0.05, atol=0.5).mean() >= 0.75


def test_diffusion_sampling_with_two_unet_calls_per_step_steps_per_denoising_step_in_run_and_analyze(tmp_path: Path) -> None:
    # --cfg separate: classifier-free guidance as two UNet calls per denoising step,
    # unconditional then conditional, back to back, then the guidance mix and the scheduler's
    # step. Before: one step per UNet call, 2 per denoising step at half its time (p50 2.23
    # ms against the program's 4.37 ms per step once)
    steps = 8
    args = ("--device", "cpu", "--latent", "16", "--channels", "32", "--steps", str(steps), "--images", "2", "--cfg", "separate")
    r = run_cli_fds("run", "--timeout", "300", "--collect", "torch", "--out", tmp_path, REAL / "diffusion_sample.py", *args)
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    series, result = json.loads((bundle / "raw" / "light.json").read_text())["series"][light["step_name"]], program_result(r.stdout)
    assert result["unet_calls_per_step"] == 2
    assert light["step_name"] == "UNet2DConditionModel.forward" and light["module"]["calls_per_step"] == 2
    assert light["steps_seen"] == result["warmup_steps"] + result["steps"]
    assert light["how"].startswith("module: UNet2DConditionModel, 2 calls per step")
    # step by step against the program's own, as for the batched loop above
    ms, own = step_ms(series)[-result["steps"]:], np.array(result["ms_each"])
    inner = np.arange(result["steps"]) % steps != steps - 1
    assert np.isclose(ms[inner], own[inner], rtol=0.05, atol=0.5).mean() >= 0.75
    # analyze on the bundle's trace: the same step, each holding both UNet calls (13
    # convolutions each; a pipeline's last step also the image decoder's)
    profile = load_trace(bundle)
    found = find_steps(profile)
    assert found.name == light["step_name"] and "2 calls per step" in found.how and found.count >= 5
    conv = np.sort(profile.ops.loc[profile.ops["name"] == "aten::conv2d", "start_ns"].to_numpy(np.int64))
    t = found.table
    held = np.searchsorted(conv, t["host_end_ns"].to_numpy(np.int64), side="right") - np.searchsorted(conv, t["host_start_ns"].to_numpy(np.int64))
    assert np.median(held) == 2 * 13


@pytest.mark.parametrize("timer", ["benchmark", "timeit"])
def test_benchmark_timer_steps_per_run_of_the_statement(tmp_path: Path, timer: str) -> None:
    # torch.utils.benchmark.Timer(stmt="model(x)").blocked_autorange() and timeit.repeat: the
    # statement runs in the timer's own compiled loop; every forward is a step (the
    # autorange's calibration runs too, which the program counts with a pre-hook)
    light, series, result = light_run(tmp_path, "bench_timer.py", "--device", "cpu", "--width", "256", "--timer", timer,
                                       "--min-run-time", "0.5", "--number", "20", "--repeat", "3")
    assert light["step_name"] == "Sequential.forward"
    assert light["steps_seen"] == result["forwards"]
    assert step_ms(series)[-result["runs"]:].mean() == pytest.approx(result["ms_per_step"], rel=0.05)


def test_encoder_decoder_greedy_decode_steps_per_decoder_token(tmp_path: Path) -> None:
    # Whisper-style: the encoder once per utterance, then one decoder call per token (the
    # first with the prompt); the encoder between utterances is a pause, in no token's step
    light, series, result = light_run(tmp_path, "encdec_greedy.py", "--device", "cpu", "--dim", "64", "--heads", "4",
                                       "--enc-layers", "2", "--dec-layers", "2", "--frames", "200", "--vocab", "512",
                                       "--tokens", "16", "--utterances", "2", env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "TextDecoder.forward"
    assert light["steps_seen"] == result["warmup_tokens"] + result["tokens"]
    assert step_ms(series)[-result["tokens"]:].mean() == pytest.approx(result["ms_per_step"], rel=0.05)


def test_a_traced_token_step_before_the_next_utterances_encoder_ends_at_its_own_call(tmp_path: Path) -> None:
    # openai-whisper's beam search (CPU probe, 2026-12-06): analyze timed each decoder call to
    # the next, so the window's step before a new clip held that clip's encoder (659 ms among
    # 33 ms steps); the light pass ends a call followed by a pause at its own end, and so does
    # the trace now. The window (calls 12-22: 10 iterations and the call that ends the 10th)
    # crosses the second utterance's encoder (after 16).
    tokens = 16
    r = run_cli_fds("run", "--timeout", "240", "--collect", "torch", "--warmup", "12", "--steps", "10", "--out", tmp_path,
                REAL / "encdec_greedy.py", "--device", "cpu", "--dim", "256", "--heads", "4", "--enc-layers", "1", "--dec-layers", "2",
                "--frames", "3000", "--vocab", "512", "--tokens", str(tokens), "--utterances", "2", "--prompt", "384",
                env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    doc = json.loads(gzip.decompress((bundle / "raw" / "torch-trace.json.gz").read_bytes()))
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    calls = sorted((e["ts"], e["dur"]) for e in events if e["name"] == "TextDecoder.forward")
    convs = [e["ts"] for e in events if e["name"] == "aten::conv1d"]  # the encoder's front end: no decoder op is one
    encoder_after = [any(ts + dur <= c < nxt for c in convs) for (ts, dur), (nxt, _) in zip(calls, calls[1:])]
    assert len(calls) == 11 and sum(encoder_after) == 1
    want = [dur / 1e3 if enc else (nxt - ts) / 1e3 for (ts, dur), (nxt, _), enc in zip(calls, calls[1:], encoder_after)]
    d = diagnose(bundle, warnings=False)
    t = d.analysis.steps.table
    got = ((t["host_end_ns"] - t["host_start_ns"]).to_numpy() / 1e6).tolist()
    assert got == pytest.approx(want, abs=0.002)  # the trace's microseconds, to the nanosecond step that ends before the next
    # each utterance's first decoder call (its 384 prompt tokens, the cross-attention keys over
    # 1,500 frames: 24 ms against ~1.1 ms tokens on the VM of 2026-12-07; with 64 prompt tokens
    # it read 8.2 ms there, under the 10 ms target, and the check passed) sets the p99, and the
    # p99 check says so
    # (before: "the tail is spikes: check swapping, gc.disable()"); the loop's own p99 leaves
    # them out, as the program's own timer over its other tokens reads it (a loaded box's
    # spikes: 8.8 ms among them seen)
    own = np.array(program_result(r.stdout)["ms_each"]).reshape(-1, tokens)
    assert own[:, 0].min() > 4 * np.median(own[:, 1:])
    p99 = next(f for f in d.findings if f.rule_id == "p99-latency")
    assert "tail-after-pauses" in p99.context, (p99.context, p99.values)
    assert p99.title.endswith("each loop's first step, after the program's other work") and p99.severity == "warning"
    loop = p99.values["loop_step_latency_ms_p99"].value
    assert loop < own[:, 0].min() and loop == pytest.approx(np.percentile(own[:, 1:], 99), rel=0.5)
    # the slowest untraced steps are the two timed utterances' first (the warm-up's, step 0, is no steady step)
    (ev,) = [e for e in p99.evidence if e.kind == "slow_untraced_steps"]
    assert sorted(r[0] for r in ev.rows[:2]) == [tokens, 2 * tokens] and all(r[-1] == "yes" for r in ev.rows[:2])


@pytest.mark.parametrize("extra", [pytest.param((), marks=pytest.mark.extended), ("--amp", "--checkpoint")])
def test_lightning_style_training_steps_per_training_batch(tmp_path: Path, extra: tuple[str, ...]) -> None:
    # training_step/validation_step methods called by a hand-written fit; validation every 4
    # batches over its own loader (not steps); autocast and gradient checkpointing (each
    # block's forward again in the backward) change nothing of the step
    light, series, result = light_run(tmp_path, "lit_train.py", "--device", "cpu", "--width", "256", "--batch-size", "64",
                                       "--batches", "12", "--val-every", "4", "--val-batches", "3", "--log-every", "4", *extra)
    assert light["step_name"] == FETCH
    assert light["steps_seen"] == result["iters"]
    # the program leaves its first batch out; each iteration from its fetch to the next
    # (the last before a validation: to the validation loader's first fetch)
    assert step_ms(series)[1:].mean() == pytest.approx(result["ms_per_step"], rel=0.05)


def test_bert_classification_with_host_tokenisation_steps_per_batch(tmp_path: Path) -> None:
    # a Python WordPiece tokenizer on each batch's strings, then the model: the iteration
    # from one forward to the next holds the next batch's tokenisation. The first timed
    # batch's tokenisation falls in the warm-up's last iteration, and on this loaded box a
    # tokenisation slowed past a median step reads as a pause (seen once: one step of 12
    # 1 ms short), so the time is held to 15 %; the count is exact
    light, series, result = light_run(tmp_path, "bert_classify.py", "--device", "cpu", "--layers", "2", "--dim", "64",
                                       "--heads", "4", "--batch", "8", "--seq", "64", "--batches", "12")
    assert light["step_name"] == "BertForSequenceClassification.forward"
    assert light["steps_seen"] == result["warmup_batches"] + result["batches"]
    assert step_ms(series)[-result["batches"]:].mean() == pytest.approx(result["ms_per_step"], rel=0.15)


@pytest.mark.parametrize("program", [pytest.param("train_eval_epoch_step", marks=pytest.mark.extended), "lit_train"])
def test_a_pass_between_two_steps_is_left_out_of_the_rate_however_short(tmp_path: Path, program: str) -> None:
    # A validation pass (or the epoch's end) between two steps, shorter than a median step,
    # was kept inside the interval by the pause rule: train_eval.py with one optimizer step
    # per epoch read 86.1 ms per step on the H200 for the program's 71.4; on this CPU, same
    # bundles: 188.6 ms for 158.9 (one step per epoch), 16.36 ms for 13.83 (lit_train.py,
    # validating every 4 batches). Each step now says whether a pass ended before it, and the
    # rate leaves out that time, whatever its length, and keeps the step after it.
    # --warmup 0: the rate covers the steps after the first, the very steps each program's
    # own mean covers (the steady state's start on this loaded box moves at random)
    if program == "lit_train":
        args = ("lit_train.py", "--device", "cpu", "--width", "256", "--batch-size", "64", "--batches", "12", "--val-every", "4",
                "--val-batches", "3", "--log-every", "4")
    else:
        epochs = 4
        args = ("train_eval.py", "--epochs", str(epochs), "--batches", "4", "--val-batches", "2", "--width", "512", "--accum-steps", "4")
    r = run_cli_fds("run", "--timeout", "240", "--collect", "nvml", "--warmup", "0", "--out", tmp_path, REAL / args[0], *args[1:])
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    series = json.loads((bundle / "raw" / "light.json").read_text())["series"][light["step_name"]]
    result = program_result(r.stdout)
    if program == "lit_train":
        # 2 epochs of 12 batches, a validation after every 4th (after the 24th: no step follows)
        assert series["pass_ended"] == [k > 0 and k % 4 == 0 for k in range(result["iters"])]
    else:
        # one step per epoch: the epoch's end and the validation before each but the first
        assert series["pass_ended"] == [False] + [True] * (epochs - 1)
    rate = steps_per_s(tmp_path)
    ends = sum(series["pass_ended"])
    assert f"{ends} pass end(s) between steps left out" in rate.note and "an evaluation pass or the epoch's end" in rate.note
    # the program's ms_per_step: its mean after the first batch (train_eval.py: after the
    # first group, each group its batch times summed)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.1)


# Issue 29, second probe: more shapes named nowhere (torch.compile's default mode with a
# recompilation, AMP training with no DataLoader, host-side top-p sampling stopping at EOS,
# length-sorted embedding batches, TorchScript recommendation inference).


def test_compile_default_mode_image_inference_steps_per_batch(tmp_path: Path) -> None:
    # model = torch.compile(model) (no CUDA graphs), a DataLoader whose last batch is
    # smaller: dynamo compiles again for it in the first pass. The loop's fetch is the step,
    # one per batch of both passes; each from its fetch to the next holds the program's batch
    batches, passes = 6, 2
    light, series, result = light_run(tmp_path, "compile_infer.py", "--device", "cpu", "--backend", "eager", "--batch", "4",
                                       "--images", "22", "--img-size", "32", "--width", "16", "--warmup", "2", "--passes", str(passes),
                                       env={"OMP_NUM_THREADS": "1"})  # torch's 2 intra-op threads on this shared 2-core box: 1 ms batches took 370
    assert result["batches"] == batches * passes
    assert light["step_name"] == FETCH
    assert light["steps_seen"] == result["batches"]
    # the last pass's batches, each with its fetch, which the program's timer starts after:
    # never less than the program's time, up to 16 % more seen on this shared 2-core box
    ms = step_ms(series)[-batches:]
    own = np.array(result["ms_each"][-batches:])
    assert 1.0 <= ms.sum() / own.sum() < 1.3
    # the first pass's last batch compiled again (dynamo's compile callbacks say so): left
    # out of the rate and the p50, as warm-up is. Before: that step (~0.5 s among ~1 ms
    # ones) stayed in the steady state, the rate 44x slower than the program's steady pass
    assert [i for i, c in enumerate(series["compiled_ns"]) if c] == [batches - 1]
    rate = steps_per_s(tmp_path)
    # left out with a note; or, where a stalled first pass moved the steady start past it, as warm-up
    assert "1 step(s) compiled" in (rate.note or "") or light["steady_start"] > batches - 1, (rate.note, light["steady_start"])
    # the rate is over the steady steps, from steady_start (the first pass's batches ran
    # slower, up to 2x, where it began there), the compiled one left out: the program's own
    # times of the same batches, and each batch's fetch, which its timer leaves out (7-15 %
    # more in 8 runs, two at a time on this 2-core box). Before, against the last pass's mean
    # alone and within 15 %: 1.82 against 1.46 ms once
    k = np.arange(len(result["ms_each"]))
    steady = np.array(result["ms_each"])[(k >= light["steady_start"]) & (k != batches - 1)]
    assert 1.0 < 1e3 / rate.value / steady.mean() < 1.3


@pytest.mark.parametrize("distill", [False, pytest.param(True, marks=pytest.mark.extended)])
def test_training_batches_made_in_the_loop_with_a_validation_loader_step_per_iteration(tmp_path: Path, distill: bool) -> None:
    # amp_train.py --val-every 10: each batch made in the loop, a DataLoader over the held-out
    # set every 10 steps under no_grad (kornia's training loop over pre-batched tensors read
    # so too, 2 steps of 939 ms for 60 of 44). The light pass grouped the optimizer's steps
    # behind the evaluations' fetches as if a loader fed them: 3 steps of 36 ms for 40 of 3.7.
    # No loader feeds the training: one step per optimizer step, each validation a pass ended.
    # --distill: a teacher called under no_grad in every step (kornia's augmentation under
    # no_grad alike): the validations were no longer told from it and stayed inside two steps
    steps, every = 40, 10
    light, series, result = light_run(tmp_path, "amp_train.py", "--device", "cpu", "--dtype", "bfloat16", "--batch", "32", "--dim", "64",
                                       "--width", "128", "--depth", "2", "--steps", str(steps), "--warmup", "4", "--log-every", "100",
                                       "--val-every", str(every), *(("--distill",) if distill else ()), env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "Optimizer.zero_grad#AdamW.zero_grad"
    assert light["steps_seen"] == result["steps"] == steps
    # zero_grad ends the iteration: step k runs from zero_grad k - 1 on, and the validation
    # after step k - 1's zero_grad is left out of the step after it, said as a pass ended
    assert [i for i, e in enumerate(series["pass_ended"]) if e] == list(range(every, steps, every))
    own = np.array(result["ms_each"])  # steps 4-39, each from its loop's top: a validation in every tenth
    assert np.median(step_ms(series)[-len(own):]) == pytest.approx(np.median(own), rel=0.15)


@pytest.mark.parametrize("zero_grad", ["end", pytest.param("start", marks=pytest.mark.extended), "both", pytest.param("model", marks=pytest.mark.extended)])
def test_amp_training_without_a_data_loader_steps_per_iteration_in_run_and_analyze(tmp_path: Path, zero_grad: str) -> None:
    # for step in range(n): random batch, autocast, GradScaler, clip_grad_norm_, scheduler,
    # .item() every 5 steps; zero_grad(set_to_none=True) at the iteration's end (as the
    # program is written), zero_grad() at its start, or model.zero_grad() (no optimizer
    # range: the optimizer's step marks the iteration), or zero_grad() at the start and
    # again at the end (both: the step marks it; before, one step per zero_grad, 47 for 24).
    # One step per optimizer step: before,
    # zero_grad's iterations ran from one to the next and the first (the last, zero_grad
    # first) was in no step: 23 steps for 24 iterations. One intra-op thread, as the other
    # CPU programs here: in the full suite, beside the other worker, two threads stretched
    # the 2 ms iteration to 20 ms and the rate's gaps into pauses
    zero, step = "Optimizer.zero_grad#AdamW.zero_grad", "Optimizer.step#AdamW.step"
    steps, warmup = 24, 4
    r = run_cli_fds("run", "--timeout", "300", "--collect", "torch", "--steps", "0", "--out", tmp_path, REAL / "amp_train.py", "--device", "cpu",
                "--dtype", "bfloat16", "--batch", "32", "--dim", "64", "--width", "128", "--depth", "2", "--steps", str(steps),
                "--warmup", str(warmup), "--log-every", "5", "--zero-grad", zero_grad, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    raw = json.loads((bundle / "raw" / "light.json").read_text())
    name = light["step_name"]
    series = raw["series"][name]
    # the light pass (its program printed the RESULT on the terminal; the torch pass's is in its log)
    result = program_result(r.stdout)
    assert name == (step if zero_grad in ("model", "both") else zero)
    assert light["steps_seen"] == result["steps"] == steps
    # medians: the light steps begin at a mark, the program's at its loop's top, so one
    # preemption can land in one and not the other (means over 20 read 6.61 against 7.08 ms
    # twice in a loaded clean-clone CI run)
    own = np.array(result["ms_each"])
    assert len(own) == result["timed_steps"]
    assert np.median(step_ms(series)[-len(own):]) == pytest.approx(np.median(own), rel=0.05)
    rate = steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)
    # the trace side's rule is the light pass's (steady.optimizer_iterations): analyze on the
    # bundle's trace reads the light pass's steady steps, each cut where the light pass cuts
    # it. Before: with zero_grad at the end (or only the optimizer's step) the window opened
    # one step late (counted in calls, the light pass's step k beginning at call k - 1) and
    # with zero_grad first the trace's last iteration was in no step: 21 steps for 22
    # the light pass's steady steps: each from its start to the next's (the last: its end), 1 ns
    # before; those the window can hold (it opens at a call: with the steady state from step
    # 0, the iteration before the first mark is in no trace; and past a leading run of fast
    # steady steps, the run's rule: a loaded clean-clone CI run's light pass read 4 of them
    # after a warm-up of 7, and the window held 13 steps where this read 17 of them)
    calls = {n: (raw["call_series"][n] if n == name else raw["series"][n])["host_start_ns"] for n in (zero, step) if n in raw["series"]}
    h = np.array(series["host_start_ns"], dtype=np.int64)
    first = max(light["warmup"] + window_start(light["step_latency_ms"], 0), int(np.count_nonzero(h < min(calls[name]))))
    ends = np.append(h[1:], series["gpu_end_ns"][-1])[first:] - 1
    h = h[first:]
    light_marks = [tuple(z) for z in zip(*(held_in(h, ends, calls[n]) for n in sorted(calls)))]
    work = raw["module_work_ns"] + [t for s in raw["modules"]["0"].values() for t in s["host_start_ns"]]
    assert held_in(h, ends, work) == [2] * len(h)  # the forward and the loss: one iteration each
    profile = load_trace(bundle)
    found = find_steps(profile)
    assert found.name == name
    t, rg, ops = found.table, profile.ranges, profile.ops
    ts, te = t["host_start_ns"].to_numpy(np.int64), t["host_end_ns"].to_numpy(np.int64)
    trace_marks = [tuple(z) for z in zip(*(held_in(ts, te, rg.loc[rg["name"] == n, "start_ns"]) for n in sorted(calls)))]
    assert found.count == len(h)  # every steady step the window can hold, no other
    assert trace_marks == light_marks
    linear = held_in(ts, te, ops.loc[ops["name"] == "aten::linear", "start_ns"])
    assert held_in(ts, te, ops.loc[ops["name"] == "aten::randn", "start_ns"]) == [1] * found.count
    assert linear == [linear[0]] * found.count and linear[0] > 0


def test_top_p_sampling_to_eos_with_a_list_kv_cache_steps_per_forward(tmp_path: Path) -> None:
    # per generation a prefill forward, then one forward per sampled token (host top-p,
    # multinomial), stopping at EOS: generations of different lengths, every forward a step
    light, series, result = light_run(tmp_path, "sample_generate.py", "--device", "cpu", "--layers", "2", "--dim", "64", "--heads", "4",
                                       "--vocab", "32", "--max-new-tokens", "32", "--generations", "4", "--prompt-len", "8",
                                       env={"OMP_NUM_THREADS": "1"})  # as the tests below: in the full suite (-n 2) torch's two
    # intra-op threads beside the other worker's stretched the program's 0.4 ms token to 2.0 ms, and the
    # stretched gaps between steps read as pauses (0.62 ms read, 2026-12-03)
    assert len(set(result["lengths"])) > 1  # EOS ended them at different lengths
    assert light["step_name"] == "GPT.forward"
    assert light["steps_seen"] == result["warmup_forwards"] + result["forwards"]
    rate = steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)


def test_length_sorted_embedding_batches_are_the_programs_trend_not_warm_up(tmp_path: Path) -> None:
    # queries sorted longest first, padded per batch, encoded, similarity + topk: the
    # batches get faster one by one. Before: the first 5 of 32 left out as warm-up, the rate
    # 0.81 of the program's mean; now only a step slower than each of the next ones is cold
    light, series, result = light_run(tmp_path, "embed_retrieval.py", "--device", "cpu", "--dim", "64", "--heads", "4", "--layers", "2",
                                       "--vocab", "1000", "--queries", "256", "--batch", "8", "--max-len", "128", "--corpus", "2000",
                                       env={"OMP_NUM_THREADS": "1"})  # in the full suite two threads' stalls read as a regime (start 22)
    assert light["step_name"] == "Encoder.forward"
    assert light["steps_seen"] == result["batches"] == 32
    ms, start = step_ms(series), light["steady_start"]
    if start > result["warmup"]:
        # a loaded box can slow the first steps past the program's own warm-up (CI, 2026-12-03:
        # 14.3 16.8 16.1 14.6 10.8 | 6.9 6.3 5.9 ... ms, start 5): more is left out only behind a
        # drop, each step left out slower than 1.25x each of the next five, never the trend's steps
        assert ms[result["warmup"]:start].min() > 1.25 * ms[start:start + 5].max()
    # the program's timed batches, each from its forward to the next (this batch's top-k,
    # the next one's padding): on this loaded box the rate's intervals wander as much
    assert ms[result["warmup"]:].mean() == pytest.approx(result["ms_per_step"], rel=0.1)


@pytest.mark.parametrize("jit", ["script", "trace"])
def test_torchscript_recommendation_inference_steps_per_request_batch(tmp_path: Path, jit: str) -> None:
    # a DLRM-style model under torch.jit.script (or trace + freeze), inference_mode with
    # no_grad nested; each batch made on the host: the scripted module's call is the step
    # (TorchScript runs its submodules without Python: one call per batch)
    light, series, result = light_run(tmp_path, "rec_jit.py", "--device", "cpu", "--jit", jit, "--batch", "64", "--tables", "4",
                                       "--rows", "1000", "--dim", "16", "--batches", "30", "--warmup", "3",
                                       env={"OMP_NUM_THREADS": "1"})
    # named after the scripted class (before: RecursiveScriptModule.forward); traced, the
    # eager DLRM that torch.jit.trace called first has that name: the scripted one keeps its class's
    assert light["step_name"] == ("DLRM.forward" if jit == "script" else "RecursiveScriptModule.forward")
    assert light["steps_seen"] == result["warmup"] + result["batches"]
    # each from its call to the next: the next batch's making instead of this one's. Medians:
    # the program's timer and the steps are shifted by one batch's making, so a preemption
    # there (2 ms batches on a loaded 2-core CI box) lands in one and not the other; a mean
    # over 12 batches read 1.69 against the program's 2.46 ms that way
    timed = result["ms_each"][result["warmup"]:]
    assert np.median(step_ms(series)[-result["batches"]:]) == pytest.approx(np.median(timed), rel=0.1)


@pytest.mark.parametrize("optimize", [pytest.param(True, marks=pytest.mark.extended), False])
def test_a_torchscript_server_is_not_told_to_torch_compile(tmp_path: Path, optimize: bool) -> None:
    # ts_serve.py: a deployment's server loads a traced ResNet-18's archive (no Python model
    # class), freezes it and runs optimize_for_inference, then answers request batches. Frozen,
    # the graph's convolutions (prim::mkldnn_convolution) record no event: 86-93 % of the step
    # is the scripted method's own time, which read "One operator is most of the step: forward
    # ... or torch.compile to fuse what surrounds it". Unfrozen, aten::mkldnn_convolution leads,
    # with the same torch.compile advice to a compiled model (probe of PyTorch's deployment
    # paths, 2026-12-07; AOTInductor and torch.compile's calls were told the same)
    from perfdoctor.analysis.metrics import analyze

    requests, warmup = 30, 5
    # exported first, by its own process: the server never defines the model's class
    subprocess.run([sys.executable, REAL / "ts_serve.py", "--archive", tmp_path / "resnet18.pt", "--img-size", "32", "--export-only"],
                   check=True, timeout=120)
    r = run_cli_fds("run", "--timeout", "240", "--out", tmp_path / "runs", REAL / "ts_serve.py", "--archive", tmp_path / "resnet18.pt",
                    "--img-size", "32", "--batch", "8", "--requests", requests, "--warmup", warmup, *(() if optimize else ("--no-optimize",)),
                    env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = (tmp_path / "runs").iterdir()
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    assert light["step_name"] == "ResNet.forward" and light["steps_seen"] == requests + warmup
    analysis = analyze(load_trace(bundle))
    assert analysis.cpu.compiled == "TorchScript"
    assert analysis.workload.task == "vision"
    said = [(o.title, o.advice) for o in analysis.cpu.observations]
    assert said and not any("torch.compile" in advice for _, advice in said), said
    if optimize:
        title, advice = said[0]
        assert title == "A TorchScript method's own time is most of the step: forward"
        assert "before torch.jit.freeze" in advice


def test_dp_sgd_logical_batches_of_poisson_sampled_physical_ones_are_whole_steps(tmp_path: Path) -> None:
    # Opacus' BatchMemoryManager shape (poisson_train.py): each logical batch Poisson-sampled and
    # split into physical batches of 64 (4 or 5 of them), one optimizer step per logical batch.
    # The splitting sampler's len is an estimate (80 for the 88 batches it yields per epoch):
    # every fetch from the 80th on was noted as its pass's last batch, so each epoch's last
    # steps were cut at them ("6 pass ends", steps of 8-25 ms among 100 ms ones, "one per 3.62
    # batches"); and with those gone, each 5-batch step lost its first batch to the median
    # group of 4 (96 ms read for 123). The probe of opacus 1.6, 2026-12-07, read the same
    light, series, result = light_run(tmp_path, "poisson_train.py", "--epochs", "2", env={"OMP_NUM_THREADS": "1"})
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert not any(json.loads((bundle / "raw" / "light.json").read_text()).get("last_batches", {}).values())
    assert light["step_name"] == "Optimizer.step#RMSprop.step"
    assert light["steps_seen"] == result["steps"] == 40
    assert f"one per {result['physical_batches'] / result['steps']:.2g} DataLoader batches" in light["how"]
    # each step from its first fetch to the next step's: the program's own timer of the same
    # logical batch, step by step (the first from before the loop, and the first of the second
    # epoch, whose timer holds the new iterator's start, left out)
    ms, own = step_ms(series)[1:], np.array(result["ms_each"][1:])
    second = result["steps"] // result["epochs"] - 1
    near = np.abs(ms - own) <= 0.02 * own
    assert near[:second].all() and near[second + 1:].all(), (ms.round(1), own.round(1))
    assert not any(series["pass_ended"][1:second + 1]) and not any(series["pass_ended"][second + 2:])


def test_accumulation_groups_that_span_epochs_of_a_prefetching_loader_keep_their_batches(tmp_path: Path) -> None:
    # denoising-diffusion-pytorch's Trainer (ddpm_train.py): an endless cycle() over accelerate's
    # prepared loader, which fetches one batch ahead, 2 batches per optimizer step, 13 per
    # epoch. At every other epoch's end a group trains the epoch's last batch after the fetch
    # that raised, then the next pass's first batch: that end of pass was read as the loop's
    # (only an optimizer step after it counted as training), so the group lost its first
    # batch and its step read 17 ms for 24 ("one per 1.93 batches"); at the others, the new
    # pass's two fetches (its first batch and the one ahead) held one fetch more than the
    # median group. The probe of denoising-diffusion-pytorch 2.3.4, 2026-12-07: ~100 ms lost
    # at 5 of 9 epoch ends, its workers started again there
    light, series, result = light_run(tmp_path, "ddpm_train.py", "--steps", "40", "--width", "1024", "--results", str(tmp_path),
                                       env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "Optimizer.step#Adam.step" and light["steps_seen"] == result["steps"] == 40
    assert "one per 2 DataLoader batches" in light["how"]
    # each step from its group's first fetch to the next group's: the program's own timer of
    # the same step (the first, from before the loop, and the last, whose sample and save
    # after its optimizer step no later fetch closes, left out)
    ms, own = step_ms(series)[1:-1], np.array(result["ms_each"][1:-1])
    assert (np.abs(ms - own) <= 0.05 * own).all(), (ms.round(1), own.round(1))
    assert not any(series["pass_ended"] or [])


def test_a_bayesian_optimisation_loop_steps_per_iteration_not_per_input_transform(tmp_path: Path) -> None:
    # BoTorch's closed loop (bo_loop.py): the GP and the acquisition are no nn.Module calls
    # (gpytorch's Module.__call__ bypasses nn.Module's; scipy's L-BFGS-B drives both), so the
    # depth-0 calls are the outcome transform (once per fit), the objective (once per
    # iteration) and the input transform, called in every kernel evaluation (~600 per
    # iteration). The outcome transform encloses the input transform's calls, but as a model
    # run once per generate encloses its decode (20 ** 2 < 11838), so the most frequent was
    # the step: "Normalize.forward, 11838 steps, p50 0.09 ms" for 20 iterations of ~150 ms.
    # Its calls hold a tenth of their span: a helper. The probe of BoTorch 0.18.1, 2026-12-07
    light, series, result = light_run(tmp_path, "bo_loop.py", "--iterations", "12", env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "Standardize.forward" and light["steps_seen"] == result["iterations"] == 12
    # each from one fit to the next: the program's own timer of the iteration, the last to
    # its objective's call (the enclosed calls' end)
    ms, own = step_ms(series), np.array(result["ms_each"])
    assert (np.abs(ms - own) <= 0.05 * own).all(), (ms.round(1), own.round(1))


# Issue 29, fifth probe: a GAN's two optimizers, a continuous-batching server loop, HF beam
# search / top-k sampling over a left-padded batch, an HF pipeline over a list.


@pytest.mark.parametrize("critic", [5, pytest.param(1, marks=pytest.mark.extended)])
def test_wgan_gp_two_optimizers_steps_per_iteration_not_per_optimizer_step(tmp_path: Path, critic: int) -> None:
    # WGAN-GP toy loop, no DataLoader: per iteration 5 critic steps (each with a gradient
    # penalty from autograd.grad(create_graph=True): two backward passes) and one generator
    # step, two Adam optimizers, D.zero_grad() / G.zero_grad() (the modules'); or one critic
    # step, DCGAN's rhythm. The step is the loop's iteration, as the program times it.
    iters, warmup = 30, 5
    light, series, result = light_run(tmp_path, "gan_train.py", "--device", "cpu", "--dim", "64", "--batch", "64", "--critic-iters", str(critic),
                                       "--iters", str(iters), "--warmup", str(warmup), env={"OMP_NUM_THREADS": "1"})
    assert light["steps_seen"] == result["iters"] == iters
    assert step_ms(series)[warmup:].mean() == pytest.approx(result["ms_per_iter"], rel=0.1)
    rate = steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)


def test_a_generator_stepped_every_kth_batch_in_the_critics_loop_leaves_one_step_per_batch(tmp_path: Path) -> None:
    # PyTorch-GAN's wgan.py rhythm: per batch one critic step, and `if i % n_critic == 0` a
    # generator step in the same loop. By the order alone (C G C C C C C G) the generator's
    # steps enclose the critic's, as with an inner critic loop: before, one step per 5
    # batches (12 for 60). Both are stepped in one loop (LoopSites): the critic's mark it
    iters, warmup = 60, 5
    light, series, result = light_run(tmp_path, "gan_train.py", "--device", "cpu", "--dim", "64", "--batch", "64", "--generator-every", "5",
                                       "--iters", str(iters), "--warmup", str(warmup), env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "Optimizer.step#Adam#1.step", light["how"]
    assert abs(light["steps_seen"] - iters) <= 1
    assert step_ms(series)[warmup:-1].mean() == pytest.approx(result["ms_per_iter"], rel=0.1)


@pytest.mark.parametrize("critic", [5, pytest.param(1, marks=pytest.mark.extended)])
def test_wgan_gp_traced_whole_steps_per_iteration_not_per_optimizer_step(tmp_path: Path, critic: int) -> None:
    # the same loop under a plain torch.profiler, read by analyze: both optimizers' steps are
    # Optimizer.step#Adam.step there (run tells them apart by torch's optimizer hooks), and
    # one step per optimizer step read 180 (60) steps for the 30 iterations. The ops inside
    # each step tell the two Adams apart (10 and 8 parameters); the iteration is then the
    # marking optimizer's, as run reads it
    iters, warmup = 30, 5
    args = ("--device", "cpu", "--dim", "64", "--batch", "64", "--critic-iters", str(critic), "--iters", str(iters), "--warmup", str(warmup))
    steps, ms, traced = traced_whole(tmp_path, "gan_train.py", *args)
    assert steps.count == traced["iters"] == iters, steps.how
    assert steps.name == "Optimizer.step#Adam#2.step"  # the generator's: it ends the iteration
    # each from the marking optimizer's step to its next: the traced run's iterations after
    # its warm-up, as its own timer (under the tracer too) reads them
    assert ms[warmup:].sum() == pytest.approx(sum(traced["ms_each"][warmup:]), rel=0.1)


@pytest.mark.parametrize("decoder", [pytest.param("sgd", marks=pytest.mark.extended), "adam"])
def test_seq2seq_tutorial_two_optimizers_one_step_per_pair_in_run_and_analyze(tmp_path: Path, decoder: str) -> None:
    # the seq2seq translation tutorial's trainIters: per sentence pair both optimizers'
    # zero_grad (before any module call), the encoder per input token, the decoder per output
    # token (3-10 of each, teacher forcing at random), then both optimizers' steps. Two SGDs
    # (the tutorial's) before: the second zero_grad ended the module scout before any module
    # call, so the light pass saw no work, and the first optimizer's steps marked the
    # iteration: 39 steps for 40 pairs, the first pair's forward in none (and, with work seen,
    # a last step of the two steps alone); the last optimizer stepped marks it now. An SGD and
    # an Adam: the SGD's zero_grad marks it, and the Adam's zero_grad, taken for an optimizer
    # step closing the iteration, read 39 steps; now only steps close it. In run and in a
    # plain trace alike
    iters, warmup = 40, 5
    args = ("--device", "cpu", "--iters", str(iters), "--warmup", str(warmup), "--hidden", "64", "--vocab", "300",
            "--decoder-optim", decoder)
    name = "Optimizer.step#SGD#2.step" if decoder == "sgd" else "Optimizer.zero_grad#SGD.zero_grad"
    light, series, result = light_run(tmp_path / "run", "seq2seq_train.py", *args, env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == name
    assert light["steps_seen"] == result["iters"] == iters
    # each pair's train() call as the program times it: 2-12 ms with the sentences' lengths
    ms, own = step_ms(series)[warmup:], np.array(result["ms_each"][warmup:])
    assert ms.sum() == pytest.approx(own.sum(), rel=0.1)
    # each step is its own pair: the pairs' times follow the sentences' random lengths, so the
    # program's times match ours step for step and not one step off (a 2-core host under load
    # takes the aligned correlation from ~0.95 to ~0.8; one step off reads ~0)
    aligned = np.corrcoef(ms, own)[0, 1]
    shifted = max(np.corrcoef(ms[1:], own[:-1])[0, 1], np.corrcoef(ms[:-1], own[1:])[0, 1])
    assert aligned > 0.6 and aligned > shifted + 0.3, (aligned, shifted)
    steps, ms, traced = traced_whole(tmp_path, "seq2seq_train.py", *args)
    assert (steps.name, steps.count) == (name, iters), steps.how
    assert ms[warmup:].sum() == pytest.approx(sum(traced["ms_each"][warmup:]), rel=0.1)


def test_sam_two_zero_grads_per_batch_one_step_per_batch_in_run_and_analyze(tmp_path: Path) -> None:
    # davda54/sam's loop: per batch two forward-backward passes, first_step(zero_grad=True)
    # and second_step(zero_grad=True); torch's ranges show SAM's zero_grad twice per batch
    # and the base SGD's step once (SAM.step is never called). Before: one step per zero_grad,
    # 59 steps of ~1 ms for 30 batches of 2 ms; the base optimizer's step marks the batch
    iters, warmup = 30, 5
    args = ("--device", "cpu", "--iters", str(iters), "--warmup", str(warmup), "--batch", "64", "--features", "64",
            "--width", "128", "--depth", "2", "--classes", "10")
    light, series, result = light_run(tmp_path / "run", "sam_train.py", *args, env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "Optimizer.step#SGD.step"
    assert light["steps_seen"] == result["iters"] == iters
    assert step_ms(series)[warmup:].sum() == pytest.approx(sum(result["ms_each"][warmup:]), rel=0.1)
    steps, ms, traced = traced_whole(tmp_path, "sam_train.py", *args)
    assert (steps.name, steps.count) == ("Optimizer.step#SGD.step", iters), steps.how
    assert ms[warmup:].sum() == pytest.approx(sum(traced["ms_each"][warmup:]), rel=0.1)


def test_transfer_learning_tutorial_val_batches_that_zero_grad_are_no_training_steps(tmp_path: Path) -> None:
    # the transfer learning tutorial's train_model: per epoch a 'train' and a 'val' phase over
    # their DataLoaders, optimizer.zero_grad() on every batch of both, backward and step in
    # 'train' only. Before: a zero_grad was a training mark, so the validation batches were
    # training steps too: 54 steps for 36 training batches, the 1.4 ms forwards among the 4 ms
    # iterations, in run and in analyze; the optimizer's steps mark the training batches now
    epochs, train, val = 3, 12, 6
    args = ("--device", "cpu", "--epochs", str(epochs), "--train-batches", str(train), "--val-batches", str(val), "--batch-size", "8",
            "--img-size", "32", "--width", "8")
    light, series, result = light_run(tmp_path / "run", "transfer_train.py", *args, env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == FETCH
    assert light["steps_seen"] == result["train_batches"] == epochs * train
    # each training batch as the program times it (its fetch included), the first epoch left out
    assert step_ms(series)[train:].sum() == pytest.approx(sum(result["ms_each"][train:]), rel=0.1)
    steps, ms, traced = traced_whole(tmp_path, "transfer_train.py", *args)
    assert (steps.name, steps.count) == (FETCH, epochs * train), steps.how
    assert ms[train:].sum() == pytest.approx(sum(traced["ms_each"][train:]), rel=0.1)


def test_reptile_steps_once_per_outer_iteration_not_per_inner_step(tmp_path: Path) -> None:
    # Reptile (the paper's sine example as PyTorch ports write it): per outer iteration a
    # deepcopy of the model, a new SGD on it, 5 inner steps, a hand-written meta-update; an
    # evaluation every 20. Before: the step was the inner zero_grad, 300 steps of 0.38 ms for
    # the program's 60 outer iterations of 3.6 ms. Each outer iteration's optimizer is a new
    # one (the bootstrap's optimizer hooks): its first step marks the iteration
    iterations, inner = 60, 5
    r = run_cli_fds("run", "--timeout", "240", "--collect", "torch", "--out", tmp_path, REAL / "reptile.py", "--device", "cpu", "--iterations", str(iterations),
                "--inner-steps", str(inner), env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    result = program_result(r.stdout)
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    assert light["step_name"] == "Optimizer.step#SGD#new.step"
    assert light["steps_seen"] == result["iterations"] == iterations
    # each from one task's first inner step to the next task's: the program's iterations,
    # shifted by a part of one; the last ends at its last inner step (its meta-update unseen)
    ms = step_ms(json.loads((bundle / "raw" / "light.json").read_text())["series"][light["step_name"]])
    own = np.array(result["ms_each"])
    assert ms[1:-1].sum() == pytest.approx(own[2:].sum(), rel=0.1)
    assert 0.5 * own[-1] < ms[-1] <= 1.05 * own[-1]
    rate = steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(own[max(1, light["steady_start"]):].mean(), rel=0.15)
    # the torch pass marked each new optimizer's first step, and analyze steps on them
    d = diagnose(bundle, warnings=False)
    assert d.analysis.steps.name == "Optimizer.step#SGD#new.step" and d.analysis.steps.count >= 5, d.analysis.steps.how


FUNC_STYLES = {  # func_train.py's style: its tiny CPU arguments, the step the light pass must choose
    "pure": (["--iters", "60", "--batch", "32", "--size", "16"], "torch.autograd.grad"),
    "pure-penalty": (["--iters", "60", "--batch", "32", "--size", "16", "--input-penalty", "0.1"], "torch.autograd.grad"),
    "dpsgd": (["--iters", "30", "--batch", "8", "--size", "12"], "SimpleCNN.forward"),
    "maml": (["--iters", "16", "--tasks", "2", "--classes", "3", "--shots", "2", "--size", "12", "--inner-steps", "2",
              "--warmup", "3"], "Optimizer.zero_grad#Adam.zero_grad"),
}


@pytest.mark.parametrize("style", [pytest.param(s, marks=pytest.mark.extended) if s == "pure-penalty" else s for s in FUNC_STYLES])
def test_torch_func_training_steps_once_per_iteration(tmp_path: Path, style: str) -> None:
    # Training written with torch.func: "pure", the JAX way (a model that is a function of a
    # parameter dict, grad_and_value, an update by tree_map: no module, optimizer, data loader
    # or backward() call; before: "no step seen"), its one torch.autograd.grad call per
    # iteration marks it, with an input-gradient penalty by an inner grad too (the inner
    # transform's call, which comes first, is part of the outer's: not 2 steps per iteration); "dpsgd", per-sample gradients by vmap(grad(...)) over
    # functional_call(model, ...): the model's one (batched) call; "maml", functorch's MAML:
    # the inner loop's grad calls inside each outer iteration, whose optimizer marks it
    args, step = FUNC_STYLES[style]
    light, series, result = light_run(tmp_path, "func_train.py", "--style", style.split("-")[0], "--device", "cpu", *args,
                                       env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == step, light["how"]
    assert light["steps_seen"] == result["iterations"]
    # each from one mark to the next: the program's iterations shifted by a part of one (the
    # last ends at its mark's end), the first two (the first call's imports) left out
    ms, own = step_ms(series), np.array(result["ms_each"])
    assert ms[2:-1].sum() == pytest.approx(own[3:].sum(), rel=0.1)


def test_dqn_steps_once_per_update_period(tmp_path: Path) -> None:
    # CleanRL's DQN: one loop over environment steps, an epsilon-greedy forward on some of
    # them, and after the learning starts an update (zero_grad, backward, Adam) every 10th:
    # the repeating unit is the update with its 10 environment steps, from one zero_grad to
    # the next, as the program times it (its forwards per environment step come and go with
    # epsilon; the exploration before the learning starts is no step)
    args = ("--device", "cpu", "--total-timesteps", "2000", "--learning-starts", "1000")
    light, series, result = light_run(tmp_path, "dqn_train.py", *args, env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "Optimizer.zero_grad#Adam.zero_grad", light["how"]
    assert light["steps_seen"] == result["updates"] == 99
    ms, own = step_ms(series), np.array(result["ms_update_periods"])
    assert ms[1:-1].sum() == pytest.approx(own[1:].sum(), rel=0.1)
    # a plain torch.profiler trace of the whole run reads the same steps
    steps, ms, traced = traced_whole(tmp_path, "dqn_train.py", *args)
    assert (steps.name, steps.count) == ("Optimizer.zero_grad#Adam.zero_grad", traced["updates"]), steps.how
    assert ms[1:-1].sum() == pytest.approx(sum(traced["ms_update_periods"][1:]), rel=0.1)


# CleanRL's off-policy programs (sac_train.py, td3_train.py) at their CPU size
RL_TINY = ("--device", "cpu", "--learning-starts", "200", "--hidden", "32", "--batch-size", "32")


def _critic_steps(tmp_path: Path, program: str, timesteps: int, *args: str) -> tuple[dict, dict, dict]:
    """``_run`` of a CleanRL off-policy ``program`` at its CPU size for ``timesteps``
    environment steps, the critics' Adam marking each: one step per critic update, give or
    take the first and the last."""
    light, series, result = light_run(tmp_path, program, *RL_TINY, "--total-timesteps", str(timesteps), *args, env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "Optimizer.step#Adam#1.step", light["how"]
    assert abs(light["steps_seen"] - result["q_updates"]) <= 1
    return light, series, result


@pytest.mark.parametrize("timesteps", [pytest.param(600, marks=pytest.mark.extended), 601])
def test_sac_steps_once_per_environment_step_whatever_the_parity(tmp_path: Path, timesteps: int) -> None:
    # CleanRL's SAC: three Adams (the critics' every environment step, the actor's and the
    # temperature's twice every 2nd step). Before: 1195 steps of any of the three for 399
    # environment steps, or the actor's pairs as 2-step iterations, by the run's length's
    # parity. Now the critics' steps mark the environment step: one step per step trained,
    # give or take the first and the last, every other one holding the two actor updates
    light, series, result = _critic_steps(tmp_path, "sac_train.py", timesteps)
    assert result["q_updates"] == timesteps - 201
    ms, own = step_ms(series)[2:-2], np.array(result["ms_each"][203:-2])
    assert ms.mean() == pytest.approx(own.mean(), rel=0.1)
    # every 2nd step holds the actor's updates: the steps alternate short and long
    short, long = np.median(ms[0::2]), np.median(ms[1::2])
    assert max(short, long) > 1.5 * min(short, long)


def test_sac_with_a_longer_policy_delay_names_its_slow_steps_as_scheduled(tmp_path: Path) -> None:
    # policy_frequency 3: every 3rd environment step holds 3 actor and 3 temperature updates
    # (q | q | q a t a t a t). The critics' steps still mark the environment step (before:
    # every Adam zero_grad, 1191 steps for 399); uneven-steps names the slow steps as the
    # loop's own scheduled work, one every 3 steps (before: the DataLoader, GC or swapping)
    from perfdoctor.analysis.metrics import analyze
    from perfdoctor.rules.engine import evaluate, load_rules

    _critic_steps(tmp_path, "sac_train.py", 600, "--policy-frequency", "3")
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    (finding,) = [f for f in evaluate(load_rules(()), analyze(load_trace(bundle))) if f.rule_id == "uneven-steps"]
    assert finding.status == "fail" and finding.title.startswith("Uneven steps: every k-th step is slow")
    assert "one every 3 steps" in finding.values["slow_step_time_ratio"].note


@pytest.mark.extended  # the Adams told apart in a plain trace: TD3's and the WGAN's traced-whole tests; SAC's steps: its light-pass tests
def test_sac_in_a_plain_trace_steps_once_per_environment_step(tmp_path: Path) -> None:
    # the same loop traced whole by torch.profiler: its three Adams told apart by the ops
    # inside their steps (optimizer_ordinals), the critics' marking the environment step
    steps, ms, traced = traced_whole(tmp_path, "sac_train.py", *RL_TINY, "--total-timesteps", "350")
    assert steps.name == "Optimizer.step#Adam#1.step", steps.how
    assert abs(steps.count - traced["q_updates"]) <= 1
    assert ms[2:-2].mean() == pytest.approx(np.mean(traced["ms_each"][203:-2]), rel=0.1)


@pytest.mark.parametrize("timesteps", [601])  # both parities: SAC's test above
def test_td3_steps_once_per_environment_step_not_per_delayed_actor_update(tmp_path: Path, timesteps: int) -> None:
    # CleanRL's TD3: two Adams, the critics' every environment step, the actor's once every
    # 2nd (`if global_step % policy_frequency == 0`, not compensated as SAC's). By the order of
    # the steps alone (C A C C A) the actor's encloses the critics' as a WGAN's generator
    # encloses its critic's inner loop (C C G): before, one step per 2 environment steps. Both
    # are stepped in one loop, which the light pass now sees (LoopSites): the critics' mark it
    light, series, result = _critic_steps(tmp_path, "td3_train.py", timesteps)
    assert result["q_updates"] == timesteps - 201
    assert result["actor_updates"] == len(range(202, timesteps, 2))  # every even step after the learning starts
    ms, own = step_ms(series)[2:-2], np.array(result["ms_each"][203:-2])
    assert ms.mean() == pytest.approx(own.mean(), rel=0.1)


def test_lightning_fabric_steps_once_per_optimizer_step(tmp_path: Path) -> None:
    # litgpt's loop on Lightning Fabric: setup() wraps the model, optimizer and loader,
    # fabric.backward per micro-batch under no_backward_sync, clip_gradients, step, zero_grad
    # every 2nd micro-batch: one step per optimizer step, its two micro-batches and fetches
    pytest.importorskip("lightning")
    light, series, result = light_run(tmp_path, "fabric_train.py", "--device", "cpu", "--precision", "32-true", "--layers", "2",
                                      "--dim", "64", "--heads", "4", "--vocab", "512", "--block", "32", "--micro-batch", "4",
                                      "--steps", "12", "--accum", "2", "--warmup", "2", env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "Optimizer.step#AdamW.step", light["how"]
    assert light["steps_seen"] == result["optimizer_steps"] == 12
    assert step_ms(series)[2:].sum() == pytest.approx(sum(result["ms_each"][2:]), rel=0.1)


def test_continuous_batching_steps_per_scheduler_iteration_not_per_forward(tmp_path: Path) -> None:
    # vLLM's loop in plain PyTorch: each iteration admits waiting requests (one prefill
    # forward each) and runs one decode forward over the running batch; requests end at
    # different lengths. The step is the scheduler's iteration, as the program times it:
    # the decode's call site marks it, the prefills' calls since the previous decode join it
    # (before: a step per forward, 71 for 47 iterations, p50 0.41 ms for 0.55 ms/iteration)
    light, series, result = light_run(tmp_path, "cont_batch.py", "--device", "cpu", "--dim", "64", "--layers", "2", "--heads", "4",
                                       "--vocab", "256", "--requests", "24", "--slots", "8", "--max-new", "24", "--max-prompt", "32",
                                       env={"OMP_NUM_THREADS": "1"})
    assert result["prefills"] == 24 and result["decodes"] == result["iters"]
    assert light["steps_seen"] == result["iters"]
    assert step_ms(series)[result["warmup"]:].mean() == pytest.approx(result["ms_per_iter"], rel=0.15)
    rate = steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)


@pytest.mark.parametrize("mode", ["beam", pytest.param("sample", marks=pytest.mark.extended)])
def test_hf_beam_search_and_top_k_sampling_over_a_padded_batch_steps_per_forward(tmp_path: Path, mode: str) -> None:
    # generate(num_beams=4) or generate(do_sample=True, top_k=50) over 4 left-padded prompts
    # of different lengths: one model forward per generated position (the prefill included),
    # in the warm-up and the 3 timed generates. Each timed generate's forwards start inside
    # its span (the program's perf_counter_ns, the light pass's clock) and, each up to the
    # next, hold all of it but its setup and beam finalisation (0.95 of it here alone). A
    # generate's last forward runs on to the next generate's first, past the span's end (by
    # the next one's setup, 1-2 ms): it is cut there.
    tokens, generations = 16, 3
    light, series, result = light_run(tmp_path, "hf_beam.py", "--mode", mode, "--device", "cpu", "--layers", "2", "--dim", "64",
                                       "--heads", "4", "--kv-heads", "2", "--ffn-dim", "128", "--vocab", "256", "--tokens", str(tokens),
                                       "--generations", str(generations), env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "LlamaForCausalLM.forward"
    assert light["steps_seen"] == result["warmup_forwards"] + result["forwards"]
    starts, ends = np.array(series["host_start_ns"]), np.array(series["gpu_end_ns"])
    end = len(ends)
    for n, (t0, t1) in zip(reversed(result["forwards_each"]), reversed(result["perf_counter_ns_each_generate"])):
        s, e = starts[end - n:end], ends[end - n:end]
        assert t0 < s[0] and s[-1] < t1
        assert 0.75 * (t1 - t0) < (np.minimum(e, t1) - s).sum() <= t1 - t0
        end -= n


def test_hf_pipeline_over_a_list_steps_per_batch(tmp_path: Path) -> None:
    # pipeline("text-classification")(texts, batch_size=8): the pipeline's own DataLoader
    # (tokenising each text in its dataset, padding in its collate) marks the batch; each
    # from its fetch to the next holds the batch's forward and its items' post-processing
    passes, batches = 3, 8
    light, series, result = light_run(tmp_path, "hf_pipeline.py", "--device", "cpu", "--layers", "2", "--dim", "64", "--heads", "4",
                                       "--texts", "64", "--batch-size", "8", "--max-words", "60", "--passes", str(passes),
                                       env={"OMP_NUM_THREADS": "1"})
    assert result["batches_per_pass"] == batches
    assert light["step_name"] == FETCH
    assert light["steps_seen"] == (passes + 1) * batches
    ms = step_ms(series)
    for k, own in enumerate(result["ms_each_pass"]):
        assert ms[(k + 1) * batches:(k + 2) * batches].sum() == pytest.approx(own, rel=0.15)
    rate = steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)


def test_a_generation_pipeline_steps_per_token_not_per_batch(tmp_path: Path) -> None:
    # pipeline("text-generation")(texts, batch_size=1, max_new_tokens=8): its DataLoader's fetch
    # marked the batch, 8 tokens one step (Whisper's speech-recognition pipeline: one step
    # per clip of 32 tokens, its p50 54x a token's). An inference loop whose generator is
    # called 4 times or more per fetch steps on its tokens
    passes, texts, tokens = 2, 8, 8
    light, series, result = light_run(tmp_path, "hf_pipeline.py", "--device", "cpu", "--layers", "2", "--dim", "64", "--heads", "4",
                                       "--texts", str(texts), "--batch-size", "1", "--max-words", "20", "--passes", str(passes),
                                       "--generate", str(tokens), env={"OMP_NUM_THREADS": "1"})
    assert result["tokens"] == passes * texts * tokens
    assert light["step_name"] == "GPT2LMHeadModel.forward"
    # the warm-up pass's too; each text's prefill, called from its own place in generate(),
    # joins the first decoding step after it (the light pass's steps by call site)
    assert light["steps_seen"] == (passes + 1) * texts * (tokens - 1)
    # each decoding step against the program's own per-token timer
    assert np.median(light["step_latency_ms"]) == pytest.approx(np.median(result["token_ms"]), rel=0.2)


@pytest.mark.parametrize("optimizer", ["lbfgs", pytest.param("adam", marks=pytest.mark.extended)])
def test_pinn_with_a_closure_steps_per_optimizer_step_not_per_closure_call(tmp_path: Path, optimizer: str) -> None:
    # a PINN for Burgers' equation: the residual's derivatives by autograd.grad
    # (create_graph=True, a second derivative through the first), no DataLoader, per outer
    # iteration optimizer.step(closure) with zero_grad, the loss and backward inside the
    # closure (LBFGS, the papers' optimizer, calls it several times per step). The step is
    # one optimizer.step(closure), as the program times it.
    iters, warmup = 20, 3
    light, series, result = light_run(tmp_path, "pinn_train.py", "--device", "cpu", "--width", "32", "--depth", "4", "--points", "512",
                                       "--iters", str(iters), "--warmup", str(warmup), "--max-iter", "5", "--optimizer", optimizer,
                                       env={"OMP_NUM_THREADS": "1"})
    calls = result["closure_calls"]
    assert (sum(calls) > 2 * iters) if optimizer == "lbfgs" else (calls == [1] * iters)
    assert light["steps_seen"] == result["iters"] == iters
    assert step_ms(series)[warmup:].mean() == pytest.approx(result["ms_per_iter"], rel=0.1)
    rate = steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)


@pytest.mark.parametrize("prefetcher", [False, pytest.param(True, marks=pytest.mark.extended)])
def test_padded_text_training_steps_per_batch(tmp_path: Path, prefetcher: bool) -> None:
    # variable-length sequences, a collate_fn padding each batch, pin_memory (on CUDA),
    # non_blocking copies, a Transformer encoder classifier; --prefetcher: Apex's
    # data_prefetcher (`while batch is not None`, the next batch fetched inside next()),
    # without its side stream on a CPU. One step per training batch, 16 per epoch; with the
    # prefetcher each epoch's fetches go F0 F1 T0 F2 T1 ... F16(StopIteration) T15
    # F17(StopIteration again): the last batch's step begins at the end of its pass (before:
    # 30 steps for 32)
    light, series, result = light_run(tmp_path, "text_train.py", "--device", "cpu", "--dim", "64", "--heads", "4", "--layers", "1",
                                       "--vocab", "1000", "--samples", "256", "--batch", "16", "--max-len", "64", "--epochs", "2",
                                       *(("--prefetcher",) if prefetcher else ()), env={"OMP_NUM_THREADS": "1"})
    assert result["batches"] == 32
    assert light["step_name"] == FETCH
    assert light["steps_seen"] == result["batches"]
    assert step_ms(series).mean() == pytest.approx(np.mean(result["ms_each"]), rel=0.1)
    rate = steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)
