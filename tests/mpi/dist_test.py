#!/usr/bin/env python3
"""dist_test.py BATCHFIT CASE - data-parallel training under mpirun on this
machine (tests/cmake/mpi.cmake registers one CTest test per case, label mpi).

Exits 77 (CTest: skipped) when mpirun is missing. Every case trains softmax
regression (one linear layer, F = 4 features in [-1, 1], C = 3 classes) on a
small CSV data set the test writes, so that the float rounding between a
single process and N ranks can be bounded from first principles (see
tolerance()), and compares with a single process trained alike.

Cases: weights2, weights3 (N ranks = one process, to rounding; every sample
once per epoch; the shares add up to E), rank_memory (a memory schedule on
rank 1 only changes rank 1's micro-batch and share, nothing else), rank_oom
(an out-of-memory on rank 1 is retried by rank 1 alone), rank_nomem (memory
that does not come back on rank 1 stops every rank at a step boundary and
rank 0 checkpoints it), kill (a rank killed mid-run ends the others within
seconds with an error, and the last checkpoint resumes), term_one (SIGTERM to
one rank only, not through mpirun, stops every rank at one step boundary,
rank 0 checkpoints it, and the group resumes from it), mismatch (ranks
started with different options, or --checkpoint on one only, fail together,
none hangs), auto_refused
(--batch auto, not supported data-parallel yet, is refused by all), alone_on (--dist
on in a group of one gives bit for bit the weights of a run alone),
adaptive (--batch adaptive: the noise scale from the ranks' gradient norms,
every rank deciding the same E), resume_exact (a group resumed from a
checkpoint ends bit for bit where the uninterrupted run ends, its shares
having moved with the ranks' speed), commands (plan, find, eval and report
under mpirun: rank 0 does them once), tokens_refused (a token model is
refused by every rank while setting up), short_step (a step of one sample
on 3 ranks: the ranks without samples add nothing), dist_off (--dist off
under mpirun: each process trains alone and prints its result),
term_after (rank 0 ended by mpirun after its stopped run says nothing more).
"""
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

BF = sys.argv[1]
CASE = sys.argv[2]
F, C = 4, 3
N_SAMPLES = 600          # not a multiple of E: each epoch ends with a shorter step
E = 64
LR = 0.02
EPOCHS = 2
TMP = tempfile.mkdtemp(prefix="bfit-mpi-")
MPIRUN = shutil.which("mpirun")


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


PRELOAD = os.environ.get("BFIT_RANK_PRELOAD", "")
ASAN = os.environ.get("ASAN_OPTIONS", "") + ":fast_unwind_on_malloc=0"


# the library's test controls (src/base/testctl.h) come from the environment:
# each epoch's sample checksum is logged in every run here
os.environ["BFIT_TEST_SAMPLE_CHECK"] = "1"


def mpirun(n, test_env=("BFIT_TEST_SAMPLE_CHECK",)):
    cmd = [MPIRUN, "--oversubscribe", "-np", str(n)]
    for name in test_env:  # into the ranks
        cmd[1:1] = ["-x", name]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    if PRELOAD:  # the sanitizer run (tests/cmake/mpi.cmake): into the ranks only
        cmd[1:1] = ["-x", "LD_PRELOAD=" + PRELOAD, "-x", "ASAN_OPTIONS=" + ASAN]
    return cmd


def run(cmd, timeout=300, expect=0, env=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, env=env)
    if expect is not None and p.returncode != expect:
        fail("%s\nexited %d (expected %d):\n%s" % (" ".join(cmd), p.returncode, expect, p.stdout[-3000:]))
    return p


def path(name):
    return os.path.join(TMP, name)


def make_data():
    """Features k/1024 in [-1, 1] (exact in float32 and in the CSV text),
    labels from a random linear teacher."""
    rnd = random.Random(7)
    W = [[rnd.uniform(-1, 1) for _ in range(F)] for _ in range(C)]
    rows = []
    for _ in range(N_SAMPLES):
        x = [rnd.randint(-1024, 1024) / 1024 for _ in range(F)]
        z = [sum(w * v for w, v in zip(Wc, x)) for Wc in W]
        rows.append((x, max(range(C), key=lambda c: z[c])))
    with open(path("train.csv"), "w") as f:
        f.write(",".join(["x%d" % i for i in range(F)] + ["label"]) + "\n")
        for x, y in rows:
            f.write(",".join(repr(v) for v in x) + ",%d\n" % y)
    with open(path("m.cfg"), "w") as f:
        f.write("input %dx1x1\nflatten\nlinear %d\n" % (F, C))
    return rows


def sample_hash_sum(rows):
    """The library's sample_check: FNV-1a 64 over a sample's float32 bytes,
    then its int32 label's, summed mod 2^64 (batchfit.h)."""
    total = 0
    for x, y in rows:
        h = 1469598103934665603
        for b in struct.pack("<%df" % F, *x) + struct.pack("<i", y):
            h = ((h ^ b) * 1099511628211) % (1 << 64)
        total = (total + h) % (1 << 64)
    return total


def train_args(extra=(), batch=None, epochs=None):
    return [BF, "train", "--model", path("m.cfg"), "--data", path("train.csv"), "--test-data", path("train.csv"),
            "--no-normalize", "--optimizer", "sgd", "--momentum", "0", "--lr", str(LR), "--batch",
            str(batch or E), "--epochs", str(epochs or EPOCHS), "--threads", "1", "--quiet"] + list(extra)


def events(log, kind=None):
    with open(log) as f:
        ev = [json.loads(line) for line in f]
    return [e for e in ev if kind is None or e["event"] == kind]


def load_weights(p):
    with open(p, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = struct.unpack("<%df" % ((e - s) // 4), b[8 + n + s:8 + n + e])
    return out


def tolerance(T, w_final_max):
    """A bound on max |w_single - w_dist| after T steps of SGD (no momentum,
    no weight decay) on softmax regression with |x| <= 1, derived:

    Each gradient entry is a sum of at most E per-sample terms
    t_i = x_j (p_c - y_c) / E, |t_i| <= 1/E. Single process and ranks add
    the same terms in another order (micro-batches, ranks, the allreduce);
    two orders differ by at most 2 gamma_{E} sum|t_i| <= 2 gamma_E
    (Higham, gamma_n = n u / (1 - n u), u = 2^-24). The logits z = W x + b
    are dot products of F + 1 terms that oneDNN may also order differently
    for another micro-batch size: |dz| <= 2 gamma_{F+1} (F + 1) Wmax, and
    softmax moves by at most half of that (sum_k |dp_c/dz_k| =
    2 p_c (1 - p_c) <= 1/2), so the terms differ by at most L |dz| / E
    summed over E terms, L = (F + 1) / 2 once more for how far apart the two
    runs' weights already are (|dz| <= (F + 1) delta, |dp| <= |dz| / 2).
    The updates fl(w - fl(lr G)) round each run once more: 2 u (Wmax + lr).
    So delta_{t+1} <= (1 + lr L) delta_t + c with
      c = lr (2 gamma_E + L 2 gamma_{F+1} (F + 1) Wmax) + 2 u (Wmax + lr),
    delta_0 = 0 (the ranks start from the same seed: their checksum is
    compared), giving delta_T <= c ((1 + lr L)^T - 1) / (lr L).
    Wmax bounds |w| over the run: |w_t| <= |w_T| + (T - t) lr (|G| <= 1)."""
    u = 2.0 ** -24
    gamma = lambda n: n * u / (1 - n * u)
    L = (F + 1) / 2.0
    wmax = w_final_max + T * LR
    c = LR * (2 * gamma(E) + L * 2 * gamma(F + 1) * (F + 1) * wmax) + 2 * u * (wmax + LR)
    return c * ((1 + LR * L) ** T - 1) / (LR * L)


def compare_weights(single, dist, T, what):
    a, b = load_weights(single), load_weights(dist)
    if sorted(a) != sorted(b):
        fail("%s: tensors %s vs %s" % (what, sorted(a), sorted(b)))
    diff = max(abs(x - y) for k in a for x, y in zip(a[k], b[k]))
    wmax = max(abs(x) for k in a for x in a[k])
    tol = tolerance(T, wmax)
    # the test must be able to fail: a sample missed or counted twice in a
    # step moves a weight by up to lr / E; the bound must be well below that
    if not tol < LR / E / 10:
        fail("the tolerance %.3g is not well below lr / E = %.3g: the test could not see a lost sample" %
             (tol, LR / E))
    print("%s: max |w_single - w_dist| = %.3g, derived bound %.3g (lr / E = %.3g), max |w| %.3g" %
          (what, diff, tol, LR / E, wmax))
    if not diff <= tol:
        fail("%s: the weights differ by %.3g, more than rounding allows (%.3g)" % (what, diff, tol))


def check_samples(log, rows, what):
    """Every sample of each epoch trained on exactly once, across ranks."""
    want = sample_hash_sum(rows)
    sc = events(log, "sample_check")
    if len(sc) != EPOCHS:
        fail("%s: %d sample_check events, expected %d" % (what, len(sc), EPOCHS))
    for e in sc:
        if e["samples"] != len(rows) or int(e["hash_sum"], 16) != want:
            fail("%s: epoch %d trained %d samples with hash sum %s; the data set has %d, sum %016x" %
                 (what, e["epoch"], e["samples"], e["hash_sum"], len(rows), want))


def steps_of(log):
    return [e for e in events(log, "step")]


def check_steps(log, n, what):
    """Each step's shares add up to its E; every rank is accounted for."""
    per_epoch = [E] * (N_SAMPLES // E) + ([N_SAMPLES % E] if N_SAMPLES % E else [])
    st = steps_of(log)
    if [s["E"] for s in st] != per_epoch * EPOCHS:
        fail("%s: the steps' E were %s, expected %s" % (what, [s["E"] for s in st], per_epoch * EPOCHS))
    for s in st:
        if len(s["ranks"]) != n or sum(r["share"] for r in s["ranks"]) != s["E"]:
            fail("%s: step %d: ranks %s do not split E %d" % (what, s["step"], s["ranks"], s["E"]))
    if len(events(log, "weights_check")) < EPOCHS:
        fail("%s: the ranks' weights were not checked after each epoch" % what)
    return len(st)


def single(rows, extra=(), name="single"):
    run(train_args(extra) + ["--save", path(name + ".st"), "--log", path(name + ".jsonl")])
    check_samples(path(name + ".jsonl"), rows, name)
    return len(steps_of(path(name + ".jsonl")))


def case_weights(n):
    rows = make_data()
    T = single(rows)
    p = run(mpirun(n) + train_args(["--save", path("dist.st"), "--log", path("dist.jsonl"), "--json"]))
    check_samples(path("dist.jsonl"), rows, "%d ranks" % n)
    # rank 0 alone prints the result; a run that ended well left no rank
    # alone with a failure (dist_alone: a caller would end the job on it)
    res = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    if len(res) != 1 or res[0]["dist_alone"] is not False or res[0]["steps"] != T:
        fail("%d ranks: expected one result, dist_alone false, %d steps: %s" % (n, T, res))
    if check_steps(path("dist.jsonl"), n, "%d ranks" % n) != T:
        fail("%d ranks took another number of steps than one process (%d)" % (n, T))
    compare_weights(path("single.st"), path("dist.st"), T, "%d ranks" % n)
    # the log is rank 0's: a step's m and k are what rank 0 ran (its share
    # in micro-batches), as its mem is, and so is the result's micro_batch
    st = events(path("dist.jsonl"), "step")
    bad = [s for s in st if (s["m"], s["k"]) != (s["ranks"][0]["m"], s["ranks"][0]["k"])]
    if bad or res[0]["micro_batch"] != st[-1]["ranks"][0]["m"]:
        fail("%d ranks: a step's m x k should be rank 0's and the result's micro_batch its last m: %s, result %d" %
             (n, (bad or st)[0], res[0]["micro_batch"]))
    # the opening line gives rank 0's share and micro-batch, not one process's E
    p = run(mpirun(n) + [a for a in train_args(["--max-steps", "1"]) if a != "--quiet"])
    said = "batch %d over %d processes (shares of about %d to start; rank 0's micro-batch %d x 1)" % (
        E, n, -(-E // n), -(-E // n))
    if said not in p.stdout:
        fail("%d ranks: the opening line should say '%s':\n%s" % (n, said, p.stdout[-1500:]))
    # the evaluation is sharded too: the ranks' slices add up to the test set,
    # and give one process's figures (the weights differ by rounding only)
    es, ed = events(path("single.jsonl"), "eval"), events(path("dist.jsonl"), "eval")
    for a, b in zip(es, ed):
        if b["test_samples"] != len(rows) or abs(a["test_loss"] - b["test_loss"]) > 1e-5 * a["test_loss"] or \
                abs(a["test_acc"] - b["test_acc"]) > 1.5 / len(rows):
            fail("%d ranks evaluated %s, one process %s" % (n, b, a))


def plan_peaks():
    """The plan's bytes for micro-batches 1..E (batchfit plan takes 16 at a time)."""
    peaks = {}
    for lo in range(1, E + 1, 16):
        p = run([BF, "plan", "--model", path("m.cfg"), "--momentum", "0", "--threads", "1", "--json", "--batch",
                 ",".join(str(m) for m in range(lo, min(lo + 16, E + 1)))])
        peaks.update({q["m"]: q["peak"] for q in json.loads(p.stdout)["plans"]})
    return peaks


def case_rank_memory():
    """Rank 1's memory drops at step 3 to what fits a micro-batch of 4 (the
    plan says so); rank 0 keeps its memory."""
    rows = make_data()
    peaks = plan_peaks()
    cap = peaks[4]
    m1 = max(m for m in peaks if peaks[m] <= cap)
    global EPOCHS
    EPOCHS = 3  # steps for the shares to follow the measured throughput
    extra = ["--margin", "0"]
    T = single(rows, extra)
    run(mpirun(2) + train_args(extra + ["--memory-schedule", "3:%d" % cap, "--memory-schedule-rank", "1",
                                        "--save", path("dist.st"), "--log", path("dist.jsonl")]))
    log = path("dist.jsonl")
    check_samples(log, rows, "rank memory")
    check_steps(log, 2, "rank memory")
    changes = events(log, "rank_batch_change")
    if not changes or any(c["rank"] != 1 for c in changes) or changes[0]["reason"] != "memory shrank" or \
            changes[0]["m"] != m1 or changes[0]["step"] != 3:
        fail("rank 1's micro-batch should have shrunk to %d at step 3 for its memory, and nothing else: %s" %
             (m1, changes))
    if events(log, "batch_change"):
        fail("rank 0's micro-batch or E changed: %s" % events(log, "batch_change"))
    after = [s for s in steps_of(log) if s["step"] > 3 and s["E"] == E]
    if any(s["ranks"][1]["m"] > m1 or s["ranks"][0]["m"] != s["ranks"][0]["share"] for s in after):
        fail("after the change rank 1 should run micro-batches of at most %d, rank 0 its whole share" % m1)
    last = events(log, "shares")[-1]
    print("rank memory: rank 1 micro-batch %d from step 3; shares %s; last change: %s" %
          (m1, last["shares"], last["why"]))
    if not (last["step"] > 3 and last["shares"][1] < last["shares"][0]):
        fail("rank 1 (micro-batch %d, slower per sample) should have been given fewer samples than rank 0 "
             "after its memory shrank: %s" % (m1, events(log, "shares")))
    compare_weights(path("single.st"), path("dist.st"), T, "rank memory")


def case_rank_oom():
    """The 6th device allocation of rank 1 fails: the first step's input
    block (parameters, gradients, statistics, the activations' block and
    the workspace come before it; no optimizer state with momentum 0).
    Rank 1 shrinks and retries its own micro-steps."""
    rows = make_data()
    T = single(rows)
    run(mpirun(2, ("BFIT_TEST_SAMPLE_CHECK", "BFIT_TEST_FAIL_ALLOC")) +
        train_args(["--memory-schedule-rank", "1", "--save", path("dist.st"), "--log", path("dist.jsonl")]),
        env=dict(os.environ, BFIT_TEST_FAIL_ALLOC="6"))  # the 6th device allocation fails, on rank 1
    log = path("dist.jsonl")
    ch = events(log, "rank_batch_change")
    if not ch or ch[0]["rank"] != 1 or ch[0]["reason"] != "out of memory" or ch[0]["ooms"] < 1:
        fail("rank 1 should have recovered from an out-of-memory (no OOM happened: has the order of the "
             "allocations changed?): %s" % ch)
    if sum(s["ranks"][0]["ooms"] for s in steps_of(log)) != 0:
        fail("rank 0 had an out-of-memory it was not given")
    check_samples(log, rows, "rank oom")
    check_steps(log, 2, "rank oom")
    compare_weights(path("single.st"), path("dist.st"), T, "rank oom")


def case_rank_nomem():
    """Rank 1 is left less memory than a micro-batch of 1 needs at step 4:
    every rank stops there (exit 3), rank 0 checkpoints step 4."""
    make_data()
    ck = path("ck")
    # 64 bytes: not even the parameters and their gradients; 1 KiB held a
    # micro-batch of 5 where oneDNN's AVX2 matmul needs no scratchpad
    p = run(mpirun(2) + train_args(["--memory-schedule", "4:64B", "--memory-schedule-rank", "1",
                                    "--checkpoint", ck, "--log", path("dist.jsonl")]), timeout=120, expect=None)
    if p.returncode != 3 or "rank 1" not in p.stdout or "not even micro-batch 1 fits" not in p.stdout:
        fail("expected exit 3 naming rank 1's memory, got %d:\n%s" % (p.returncode, p.stdout[-2000:]))
    if sorted(os.listdir(ck)) != ["ckpt-000000000004.safetensors"]:
        fail("rank 0 should have checkpointed step 4: %s" % os.listdir(ck))
    print("rank nomem: exit 3, %s" % os.listdir(ck))


def rank_pids(mp):
    """The ranks mpirun started: pid by rank (children of this mpirun only)."""
    out = {}
    for pid in subprocess.run(["pgrep", "-P", str(mp.pid)], stdout=subprocess.PIPE, text=True).stdout.split():
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
            out[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(pid)
        except (OSError, KeyError, ValueError):
            pass
    return out


def checkpointing_group(ck, log):
    """Two ranks training EPOCHS epochs with checkpoints every 20 steps into
    ck, once the first is written: (the mpirun process, the ranks' pids)."""
    make_data()
    args = train_args(["--checkpoint", ck, "--checkpoint-every", "20", "--keep", "2", "--log", path(log)])
    mp = subprocess.Popen(mpirun(2) + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.time()
    while time.time() - t0 < 60 and not (os.path.isdir(ck) and any(f.endswith(".safetensors") for f in os.listdir(ck))):
        time.sleep(0.05)
    pids = rank_pids(mp)
    if 1 not in pids or mp.poll() is not None:
        mp.kill()
        fail("no checkpoint within 60 s, or rank 1 not found (%s)" % pids)
    return mp, pids


def resume_to_end(ck, step):
    """The group resumed from ck goes on from step to the end."""
    run(mpirun(2) + [BF, "train", "--resume", ck, "--quiet", "--log", path("r.jsonl")], timeout=300)
    res = events(path("r.jsonl"), "resume")
    if not res or res[0]["step"] != step or events(path("r.jsonl"), "end")[0]["steps"] != EPOCHS * 10:
        fail("the resumed run should go on from step %d to %d: %s" % (step, EPOCHS * 10, res))


def case_kill():
    """Rank 1 is killed (SIGKILL) once checkpoints are being written: mpirun
    ends rank 0 within seconds with an error, the last checkpoint is whole
    and a resumed run trains from it to the end."""
    global EPOCHS
    EPOCHS = 150  # 1,500 steps: the stop lands by step ~400; the resume to the end stays short under ASan
    ck = path("ck")
    mp, pids = checkpointing_group(ck, "k.jsonl")
    os.kill(pids[1], signal.SIGKILL)
    killed = time.time()
    try:
        out, _ = mp.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        mp.kill()
        fail("rank 0 still ran 30 s after rank 1 was killed")
    took = time.time() - killed
    print("kill: the job ended %.2f s after rank 1 was killed, mpirun exit %d" % (took, mp.returncode))
    if took > 10 or mp.returncode == 0 or "rank 1" not in out:
        fail("expected an error naming rank 1 within 10 s:\n%s" % out[-2000:])
    last = sorted(f for f in os.listdir(ck) if f.endswith(".safetensors"))[-1]
    step = int(last[5:-12])
    resume_to_end(ck, step)
    print("kill: resumed from %s (step %d) and trained to the end" % (last, step))


def case_term_one():
    """SIGTERM sent to rank 1 alone (a scheduler or a user signalling one
    process, not mpirun): rank 1 learns of the stop first, the others from
    its status word; every rank stops at the same step boundary, rank 0
    writes a checkpoint there, every rank exits 143, and the group resumes
    from that checkpoint to the end."""
    global EPOCHS
    EPOCHS = 150
    ck = path("ck")
    mp, pids = checkpointing_group(ck, "t.jsonl")
    os.kill(pids[1], signal.SIGTERM)
    try:
        out, _ = mp.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        mp.kill()
        fail("the job still ran 60 s after rank 1 was sent SIGTERM")
    print("term one: mpirun exit %d" % mp.returncode)
    if mp.returncode != 143 or "MPI_ERR" in out or "MPI_ABORT" in out:
        fail("expected every rank to stop and exit 143 (SIGTERM), no MPI error:\n%s" % out[-3000:])
    last = sorted(f for f in os.listdir(ck) if f.endswith(".safetensors"))[-1]
    step = int(last[5:-12])
    said = "stopped by SIGTERM at step %d (sent to rank 1; every rank stopped at this step)" % step
    if said not in out or "resume with: mpirun -np 2 batchfit train --resume" not in out:
        fail("rank 0 should say so and checkpoint the step where the group stopped (%s):\n%s" % (last, out[-2000:]))
    resume_to_end(ck, step)
    print("term one: stopped and checkpointed at step %d, resumed and trained to the end" % step)


def term_rank(rank, extra):
    """Trains a model big enough to take seconds on 2 ranks, sends SIGTERM to
    `rank` alone after 20 steps, and returns mpirun's exit code and output."""
    with open(path("big.cfg"), "w") as f:
        f.write("input %dx1x1\nflatten\nlinear 2048\nrelu\nlinear 1024\nrelu\nlinear %d\n" % (F, C))
    args = train_args(extra + ["--log", path("t.jsonl")], batch=16, epochs=1000)
    args[args.index("--model") + 1] = path("big.cfg")
    if os.path.exists(path("t.jsonl")):
        os.remove(path("t.jsonl"))
    mp = subprocess.Popen(mpirun(2) + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.time()

    def steps():  # the log as it is written: absent at first, its last line maybe partial
        try:
            with open(path("t.jsonl")) as f:
                return f.read().count('"event":"step"')
        except OSError:
            return 0
    while time.time() - t0 < 60 and mp.poll() is None and steps() < 20:
        time.sleep(0.05)
    pids = rank_pids(mp)
    if rank not in pids or mp.poll() is not None:
        mp.kill()
        fail("no 20 steps within 60 s, or rank %d not found (%s)" % (rank, pids))
    os.kill(pids[rank], signal.SIGTERM)
    try:
        out, _ = mp.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        mp.kill()
        fail("the job still ran 60 s after rank %d was sent SIGTERM" % rank)
    return mp.returncode, out


def case_term_after():
    """SIGTERM to rank 1 alone with a checkpoint of 17 MB: rank 0 writes it
    after rank 1 has stopped, so rank 1 exits (143) first and mpirun ends
    rank 0 with SIGTERM as it finishes. Its run is over by then: it must not
    announce a stop and a checkpoint to come (it once did, after saying
    where the checkpoint was). Then SIGTERM to rank 0 of a run without
    --checkpoint: it announces the stop without a checkpoint (it once
    promised one, then said none was written)."""
    make_data()
    rc, out = term_rank(1, ["--checkpoint", path("ck"), "--checkpoint-every", "100000"])
    if rc != 143 or "(sent to rank 1; every rank stopped at this step)" not in out:
        fail("expected every rank to stop and exit 143, rank 0 to say so:\n%s" % out[-3000:])
    if "stopping every process" in out:
        fail("rank 0 announced a stop after its run had ended:\n%s" % out[-3000:])
    rc, out = term_rank(0, [])
    if rc != 143 or "stopping every process at the next step boundary" not in out or "checkpoint (if" in out \
            or "no checkpoint was written" not in out:
        fail("expected rank 0 to announce a stop without a checkpoint, and exit 143:\n%s" % out[-3000:])


def case_resume_exact():
    """A group whose shares had moved with the ranks' measured speed, resumed
    from a checkpoint, ends bit for bit where the uninterrupted run ends, as
    one process does: the checkpoint keeps the shares in force and each
    rank's own controller (its micro-batch and throughput records). Rank 1
    runs micro-batches of 4 (resources may differ by rank), so under the
    test clock (a counter: the same times in every run) it measures slower
    and its share shrinks, the same way in every run."""
    global EPOCHS
    make_data()
    EPOCHS = 6
    env = dict(os.environ, BFIT_TEST_CLOCK="0.001")
    tenv = ("BFIT_TEST_SAMPLE_CHECK", "BFIT_TEST_CLOCK")

    def group(args0, args1):
        # the second app context gets the ranks' environment too (under the
        # sanitizers: the preloads, without which Open MPI's plugins unload
        # and LeakSanitizer cannot name what they never freed)
        second = mpirun(1, tenv)[1:]
        return mpirun(1, tenv) + args0 + [":"] + [a for a in second if a not in ("--oversubscribe", "--allow-run-as-root")] + args1

    ck = ["--checkpoint", path("ck"), "--checkpoint-every", "20", "--keep", "5"]
    run(group(train_args(ck + ["--save", path("a.st"), "--log", path("a.jsonl")]), train_args(ck + ["--micro-batch", "4"])),
        env=env)
    moved = [e for e in events(path("a.jsonl"), "shares") if 0 < e["step"] <= 20]
    if not moved:
        fail("the shares did not move before the checkpoint at step 20: the test would show nothing")
    os.mkdir(path("r"))
    shutil.copy(os.path.join(path("ck"), "ckpt-000000000020.safetensors"), path("r"))
    resume = [BF, "train", "--resume", path("r"), "--quiet"]
    run(group(resume + ["--save", path("r.st"), "--log", path("r.jsonl")], resume + ["--micro-batch", "4"]), env=env)
    first = events(path("r.jsonl"), "shares")
    print("resume exact: shares at the checkpoint %s; after resuming %s" %
          (moved[-1]["shares"], [(e["step"], e["shares"]) for e in first if e["step"] >= 20][:3]))
    if any(e["step"] == 20 for e in first):
        fail("the resumed run split E afresh at step 20: %s" % first)
    with open(path("a.st"), "rb") as a, open(path("r.st"), "rb") as b:
        if a.read() != b.read():
            diff = max(abs(x - y) for k, v in load_weights(path("a.st")).items()
                       for x, y in zip(v, load_weights(path("r.st"))[k]))
            fail("the resumed group's weights differ from the uninterrupted run's by up to %.3g" % diff)
    # three ranks cannot take two ranks' shares: they start equal, and say so
    os.mkdir(path("r3"))
    shutil.copy(os.path.join(path("ck"), "ckpt-000000000020.safetensors"), path("r3"))
    p = run(mpirun(3, tenv) + [BF, "train", "--resume", path("r3"), "--log", path("r3.jsonl")], env=env)
    if "is of another number of ranks: the shares start equal" not in p.stdout:
        fail("a checkpoint of 2 ranks resumed on 3 should say the shares start equal:\n%s" % p.stdout[-2000:])
    # and each rank measures its speed afresh: the checkpoint's records are
    # rank 0's of another group (once every rank started from them, and the
    # first split quoted them as the three ranks' speeds)
    sh = [e for e in events(path("r3.jsonl"), "shares")]
    if not sh or sh[0]["step"] != 20 or "no throughput measured yet" not in sh[0]["why"]:
        fail("the 3 ranks' first split should be equal for want of measurements: %s" % sh[:2])


def case_mismatch():
    """Ranks given different batches: every rank says so and exits, none waits."""
    make_data()
    cmd = mpirun(1) + train_args() + [":", "-np", "1"] + train_args(["--batch", "32"])
    p = run(cmd, timeout=60, expect=None)
    if p.returncode == 0 or p.stdout.count("must be given the same") < 1:
        fail("expected both ranks to refuse different options:\n%s" % p.stdout[-2000:])
    print("mismatch: exit %d" % p.returncode)
    # what changes the samples, the evaluation or the schedule on one rank
    # only: once trained silently (the gradient sum made the weights agree)
    # or found at the epoch's weights check
    base = train_args()
    for what, rank1 in (("normalized", [a for a in base if a != "--no-normalize"]),
                        ("--eval-samples", base + ["--eval-samples", "100"]), ("--warmup", base + ["--warmup", "3"]),
                        ("--lr-ref-batch", base + ["--lr-ref-batch", "32"])):
        p = run(mpirun(1) + base + [":", "-np", "1"] + rank1, timeout=60, expect=None)
        if p.returncode == 0 or "must be given the same" not in p.stdout or "differ in their parameters" in p.stdout:
            fail("expected both ranks to refuse at set-up a rank 1 %s:\n%s" % (what, p.stdout[-2000:]))
    # paths of 3500 characters each (legal: under PATH_MAX) must not push
    # the seed out of the options' checksum
    base = train_args()
    for opt, name in (("--model", "m.cfg"), ("--data", "train.csv"), ("--test-data", "train.csv")):
        base[base.index(opt) + 1] = os.path.join(TMP, "./" * 1750 + name)
    p = run(mpirun(1) + base + [":", "-np", "1"] + base + ["--seed", "2"], timeout=60, expect=None)
    if p.returncode == 0 or "must be given the same" not in p.stdout:
        fail("expected both ranks to refuse different seeds beside long paths:\n%s" % p.stdout[-1000:])
    # --checkpoint on one rank only: the ranks would take part in different
    # exchanges at the step boundaries (once MPI_ERR_TRUNCATE and an abort)
    ck = ["--checkpoint", path("ck"), "--checkpoint-every", "2"]
    for first, second in ((train_args(), train_args(ck)), (train_args(ck), train_args())):
        p = run(mpirun(1) + first + [":", "-np", "1"] + second, timeout=60, expect=None)
        if p.returncode == 0 or p.stdout.count("whether to checkpoint") < 1 or "MPI_ERR" in p.stdout or \
                "MPI_ABORT" in p.stdout:
            fail("expected both ranks to refuse --checkpoint given to one rank only:\n%s" % p.stdout[-2000:])


def case_auto_refused():
    """--batch auto times one device's ladder: refused data-parallel, by
    every rank at once, rather than letting the ranks decide E apart."""
    make_data()
    p = run(mpirun(2) + train_args(batch="auto"), timeout=60, expect=None)
    if p.returncode == 0 or "--batch: auto is not supported data-parallel" not in p.stdout:
        fail("expected --batch auto to be refused on 2 ranks:\n%s" % p.stdout[-2000:])


def case_alone_on():
    """A group of one (MPI without mpirun): the same steps as a run alone,
    with the exchanges and the (one-rank) sum in between: bit for bit."""
    rows = make_data()
    single(rows)
    env = dict(os.environ, LD_PRELOAD=PRELOAD, ASAN_OPTIONS=ASAN) if PRELOAD else None  # MPI without mpirun
    run(train_args(["--dist", "on", "--save", path("on.st"), "--log", path("on.jsonl")]), env=env)
    if not events(path("on.jsonl"), "dist"):
        fail("--dist on did not train as a group")
    with open(path("single.st"), "rb") as a, open(path("on.st"), "rb") as b:
        if a.read() != b.read():
            fail("a group of one should give the weights of a run alone, bit for bit")


def case_adaptive():
    """--batch adaptive on 2 ranks: the noise scale comes from the ranks'
    local and global gradient norms; every rank decides the same E (a
    disagreement fails the run), and E follows the noise scale."""
    make_data()
    run(mpirun(2) + train_args(["--batch-min", "16", "--batch-max", "256", "--log", path("a.jsonl")],
                               batch="adaptive", epochs=20))
    st = steps_of(path("a.jsonl"))
    ns = [s["noise_scale"] for s in st if s["noise_scale"] > 0]
    if not ns:
        fail("no noise scale was estimated from the ranks' norms")
    changes = [c for c in events(path("a.jsonl"), "batch_change") if c["reason"] == "noise scale"]
    print("adaptive: noise scale %.4g after %d steps; E changes %s" %
          (ns[-1], len(st), [(c["step"], c["prev_E"], c["E"]) for c in changes]))
    if not changes:
        fail("E never followed the noise scale")


def case_short_step():
    """Epochs of 577 samples with E = 64 end with a step of one sample: on 3
    ranks two train on none that step, and must add nothing to the gradient
    sum (backward sets a step's gradients and zeroing only marks them, so
    such a rank once added the last step's sum again). The weights are one
    process's, to rounding."""
    make_data()
    extra = ["--epoch-samples", "577"]
    run(train_args(extra + ["--save", path("single.st"), "--log", path("single.jsonl")]))
    run(mpirun(3) + train_args(extra + ["--save", path("dist.st"), "--log", path("dist.jsonl")]))
    st = steps_of(path("dist.jsonl"))
    idle = [s["step"] for s in st if any(r["share"] == 0 for r in s["ranks"])]
    if len(idle) != EPOCHS:
        fail("expected one step per epoch with a rank of no samples, got steps %s" % idle)
    compare_weights(path("single.st"), path("dist.st"), len(st), "3 ranks, a step of one sample")


def case_dist_off():
    """--dist off under mpirun: each process trains alone, so each prints
    its own result (rank 1's was once dropped as a group's non-writer's)."""
    make_data()
    p = run(mpirun(2) + train_args(["--dist", "off", "--json"]), timeout=120)
    res = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    if len(res) != 2 or any(r["steps"] != 20 or r["dist_alone"] for r in res):
        fail("expected two results of 20 steps, one per process alone:\n%s" % p.stdout[-2000:])


def case_tokens_refused():
    """A token model is not trained data-parallel yet: every rank refuses it
    while setting up, before the group says it trains or splits a step."""
    with open(path("tok.cfg"), "w") as f:
        f.write("input tokens=8\nembed 16 vocab=256 positions=8\nlinear 256\n")
    for name in ("tok.txt", "tok_test.txt"):  # a test text of its own: 40 lines have no test part
        with open(path(name), "w") as f:
            f.write("In the beginning God created the heaven and the earth.\n" * 40)
    p = run(mpirun(2) + [BF, "train", "--model", path("tok.cfg"), "--data", path("tok.txt"), "--test-data",
                         path("tok_test.txt"), "--threads", "1", "--batch", "8", "--max-steps", "2"], timeout=60,
            expect=None)
    if p.returncode == 0 or p.stdout.count("token models is not supported") != 2 or "data-parallel over" in p.stdout \
            or "shares of 8:" in p.stdout:  # the split of a step (the opening line's plan says "shares of about")
        fail("expected both ranks to refuse a token model before training as a group:\n%s" % p.stdout[-2000:])


def case_commands():
    """plan, find, eval and report are one process's work: under mpirun rank
    0 does it once and says so, the others exit at once (two ranks would
    print everything twice, time find's steps against each other, and
    write one report file at the same time)."""
    make_data()
    run(train_args(["--epochs", "1", "--save", path("w.st"), "--log", path("w.jsonl")]))
    data = ["--model", path("m.cfg"), "--data", path("train.csv"), "--threads", "1"]
    cmds = {"plan": ([BF, "plan", "--model", path("m.cfg"), "--threads", "1", "--batch", "64"], "largest batch:"),
            "find": ([BF, "find"] + data + ["--memory", "64MiB", "--repeats", "1"], "largest batch:"),
            "eval": ([BF, "eval"] + data + ["--weights", path("w.st"), "--no-normalize"], "test loss"),
            "report": ([BF, "report", path("w.jsonl"), "-o", path("r.html")], "report written")}
    for name, (cmd, said) in cmds.items():
        p = run(mpirun(2) + cmd, timeout=120)
        note = "%s runs in one process: rank 0 of 2 does it" % name
        lines = p.stdout.splitlines()
        if sum(l.startswith(said) for l in lines) != 1 or p.stdout.count(note) != 1:
            fail("mpirun -np 2 batchfit %s: expected a line '%s' once and the note once:\n%s" % (name, said, p.stdout[-2000:]))
    # help and the version: rank 0 prints them (train's help too)
    for cmd, said in (([BF, "train", "--help"], "Usage: batchfit train"), ([BF, "--version"], "batchfit "),
                      ([BF, "plan", "--help"], "Usage: batchfit plan")):
        p = run(mpirun(2) + cmd, timeout=60)
        if sum(l.startswith(said) for l in p.stdout.splitlines()) != 1:
            fail("mpirun -np 2 %s: expected '%s' once:\n%s" % (" ".join(cmd[1:]), said, p.stdout[-2000:]))
    print("commands: plan, find, eval and report ran once under mpirun -np 2; help and the version printed once")


def main():
    if not MPIRUN:
        print("mpirun not found (apt-get install openmpi-bin): skipped")
        return 77
    cases = {"weights2": lambda: case_weights(2), "weights3": lambda: case_weights(3),
             "rank_memory": case_rank_memory, "rank_oom": case_rank_oom, "rank_nomem": case_rank_nomem,
             "kill": case_kill, "term_one": case_term_one, "mismatch": case_mismatch, "alone_on": case_alone_on, "adaptive": case_adaptive,
             "auto_refused": case_auto_refused, "commands": case_commands,
             "tokens_refused": case_tokens_refused, "short_step": case_short_step,
             "dist_off": case_dist_off, "term_after": case_term_after, "resume_exact": case_resume_exact}
    try:
        cases[CASE]()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    print("%s: passed" % CASE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
