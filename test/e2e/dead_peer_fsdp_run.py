# A rank of fsdp-run dies mid-run: fsdp-run runs the sharded GPT's generate many times on
# W=2 ranks (--repeat=1000000, killed long before it ends, --timeout=10); once its worker processes have run a while, this
# test SIGKILLs rank 1's worker (the child of fsdp-run whose environment has RANK=1). fsdp-run
# must exit 3 (a worker failed) with one `error:` line naming rank 1 and the signal, within
# FSDP_OPT_TIMEOUT_S plus slack, and leave no worker behind.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t

import os
import signal
import subprocess
import sys
import tempfile
import time

import fsdp_harness as h

TIMEOUT_S = 10
SLACK_S = 10
RUN_BEFORE_KILL_S = 6


def children(pid):
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid != pid:
                continue
            with open("/proc/%s/environ" % entry, "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            out.append((int(entry), env.get(b"RANK", b"").decode()))
        except (OSError, IndexError, ValueError):
            continue
    return out


def main():
    out_dir = sys.argv[1]
    t = h.Test("dead_peer_fsdp_run")
    files = h.gpt_generate_rank_files(t, out_dir, 2, 4)
    if not files:
        return t.finish("")
    inputs, d = files

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen([h.which("fsdp-run"), d, "--method=generate", "--inputs=" + inputs,
                              "--repeat=1000000", "--timeout=%d" % TIMEOUT_S], stdout=out, stderr=err,
                             preexec_fn=h._set_pdeathsig)
        victim, workers = None, []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60 and p.poll() is None:
            workers = children(p.pid)
            ranks = {rank: pid for pid, rank in workers}
            if "1" in ranks and "0" in ranks:
                victim = ranks["1"]
                break
            time.sleep(0.05)
        still_running = False
        if victim is not None:
            time.sleep(RUN_BEFORE_KILL_S)  # both workers loaded and inside generate by now
            still_running = p.poll() is None and os.path.exists("/proc/%d" % victim)
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                still_running = False  # reported by the check below, not as a traceback
        killed_at = time.monotonic()
        try:
            p.wait(timeout=TIMEOUT_S + SLACK_S + 30)
            hung = False
        except subprocess.TimeoutExpired:
            hung = True
            p.kill()
            p.wait(timeout=30)
        took = time.monotonic() - killed_at
        leftover = [pid for pid, _ in workers if os.path.exists("/proc/%d" % pid) and pid != victim]
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()

    t.check(victim is not None and still_running, "fsdp-run started 2 workers, still running after %d s: "
            "SIGKILL sent to rank 1's worker (pid %s)" % (RUN_BEFORE_KILL_S, victim),
            "rc=%s stdout=%s stderr=%s" % (p.returncode, stdout[-500:], stderr[-1000:]))
    errors = [l for l in stderr.splitlines() if l.startswith("error:")]
    t.check(not hung and p.returncode == 3 and took <= TIMEOUT_S + SLACK_S and len(errors) == 1
            and "rank 1" in errors[0] and "signal 9" in errors[0],
            "fsdp-run exits %s %.1f s after the kill with one error naming rank 1 and signal 9" % (p.returncode, took),
            errors[0] if errors else "hung=%s stderr=%s" % (hung, stderr[-1500:]))
    t.check(not leftover, "no worker left running", "left: %s" % leftover)
    return t.finish("W=2 fsdp-run, rank 1's worker SIGKILLed mid-run: fsdp-run failed in %.1f s naming it, "
                    "no worker left" % took)


if __name__ == "__main__":
    sys.exit(main())
