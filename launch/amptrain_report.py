"""amptrain_report - what the launch scripts (scaling, compare-amp, plot-metrics) share: finding the
amptrain binary, reading its config, running a command with a log and a time limit, reading its JSON
lines and metrics files, and drawing with matplotlib.

matplotlib is optional: without it pyplot() says so on stderr and returns None, and the scripts still
write their CSV and markdown. In a source tree this module sits in launch/ beside the scripts; in an
installed prefix in share/amptrain/python/ (the scripts look in both places).
"""

import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys

import amptrain_python

MPL_MISSING = amptrain_python.missing("matplotlib", "python3-matplotlib")

# One color per (implementation, precision), the same in every picture.
COLORS = {("amptrain", "amp"): "tab:blue", ("amptrain", "fp32"): "tab:red",
          ("torch", "amp"): "tab:green", ("torch", "fp32"): "tab:purple"}


class UsageError(Exception):
    """Bad arguments or input files: the script prints the message and exits with code 2."""


class Stopped(BaseException):
    """SIGTERM or SIGHUP arrived (SIGINT arrives as KeyboardInterrupt): the run in progress is stopped and the
    script exits with 128 + the signal's number."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum, frame):
    raise Stopped(signum)


def run_main(prog, main):
    """sys.exit(main(sys.argv[1:])), with a UsageError as one line on stderr and exit code 2, an OSError as one
    line and exit code 1, and SIGTERM, SIGHUP or SIGINT ending the command in progress (run_logged) first."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_stopped)
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        print(f"{prog}: see {prog} --help", file=sys.stderr)
        sys.exit(2)
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"{prog}: {where}{e.strerror or e}", file=sys.stderr)
        sys.exit(1)
    except Stopped as e:
        print(f"{prog}: stopped by signal {e.signum}", file=sys.stderr)
        sys.exit(128 + e.signum)
    except KeyboardInterrupt:
        sys.exit(130)


def make_dirs(path, flag="--out"):
    """os.makedirs(path) with a UsageError naming the flag when it cannot be made."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot make the folder: {e.strerror}")


# ---- the binary and its config -----------------------------------------------------------------------------


def find_amptrain(explicit, script_dir):
    """The amptrain binary: explicit (a --amptrain flag), else $AMPTRAIN, else the one next to the script
    (an installed prefix's bin/), else the script's source tree's build/amptrain, else amptrain on PATH."""
    if explicit:
        candidates = [explicit]
    elif os.environ.get("AMPTRAIN"):
        candidates = [os.environ["AMPTRAIN"]]
    else:
        candidates = [os.path.join(script_dir, "amptrain"), os.path.join(script_dir, os.pardir, "build", "amptrain"),
                      shutil.which("amptrain")]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.abspath(path)
    where = candidates[0] if len(candidates) == 1 else "next to the script, in build/ or on PATH"
    raise UsageError(f"amptrain binary not found or not executable ({where}); build it or give --amptrain PATH")


def amptrain_config(amptrain, config, overrides):
    """The merged config as amptrain itself reads it (the file plus the overrides): {"section.key": text}.
    Keys a preset fixes (printed as comments) are included."""
    cmd = [amptrain, config, "--print-config", *overrides]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise UsageError(f"amptrain could not read the config (exit {r.returncode}): {shlex.join(cmd)}\n"
                         + (r.stderr or r.stdout).strip())
    section, values = None, {}
    for line in r.stdout.splitlines():
        m = re.match(r"^(\w+):\s*$", line)
        if m:
            section = m.group(1)
            continue
        m = re.match(r"^\s+(?:#\s*)?(\w+):\s*(.*?)\s*(\(fixed by .*\))?\s*$", line)
        if m and section:
            values[f"{section}.{m.group(1)}"] = re.sub(r"\s+#.*$", "", m.group(2))
    if "data.batch_size" not in values:
        raise UsageError(f"could not find data.batch_size in the output of {shlex.join(cmd)}")
    return values


# ---- running -----------------------------------------------------------------------------------------------


def _session_processes(sid):
    """Pids of the processes in session sid (Linux /proc; field 6 of /proc/PID/stat)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 4 and int(fields[3]) == sid:
            pids.append(int(entry))
    return pids


def stop_session(proc, grace=15):
    """Stops proc, started with start_new_session=True, and every process of its session: SIGTERM to its
    process group (launch/amptrain-mpirun passes it to mpirun as SIGUSR1: the ranks finish their step and
    exit), then after `grace` seconds SIGKILL to every process left in the session (mpirun and the ranks
    run in process groups of their own, which a signal to proc's group does not reach)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    for pid in _session_processes(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def run_logged(cmd, env, log_path, timeout):
    """Runs cmd with stdout and stderr together into log_path (after a '$ command' line); returns
    (output, exit code), the code being "timeout" or "not started" when it did not finish. Stopped
    (SIGTERM, SIGHUP) or SIGINT while it runs stops it and its session (stop_session), then propagates."""
    try:
        # its own session, so that a timeout or a stop ends it and every process it started (mpirun's ranks)
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    except OSError as e:
        output, rc = str(e), "not started"
    else:
        try:
            output, _ = proc.communicate(timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            stop_session(proc)
            output, _ = proc.communicate()
            rc = "timeout"
        except BaseException:
            # a second signal must not cut the clean-up short
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP, signal.SIGINT})
            stop_session(proc, grace=30)
            output, _ = proc.communicate()
            _write_log(log_path, cmd, output)
            raise
    _write_log(log_path, cmd, output)
    return output, rc


def _write_log(log_path, cmd, output):
    with open(log_path, "w") as f:
        f.write(f"$ {shlex.join(cmd)}\n{output}")


def error_lines(output, keep=3):
    """The last few lines of a failed run, without Open MPI's boxed banners (between lines of dashes)."""
    lines, boxed, inside = [], [], False
    for line in output.splitlines():
        if re.fullmatch(r"\s*-{20,}\s*", line):
            inside = not inside
            continue
        line = line.strip()
        if line and not line.startswith("amptrain-mpirun:"):
            target = boxed if inside else lines
            if line not in target:
                target.append(line)
    return (lines or boxed)[-keep:]


def failure_text(rc, output, timeout):
    tail = error_lines(output)
    return (f"exit {rc}" if rc != "timeout" else f"timed out after {timeout:g} s") + \
        ("" if not tail else ": " + " | ".join(tail))


# ---- JSON lines --------------------------------------------------------------------------------------------


def parse_json_object(line):
    """A JSON object from one line, or None. C's printf writes a non-finite double as nan / inf, which JSON
    lacks: they are read as NaN / Infinity."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    line = re.sub(r"(:\s*)(-?)(nan|inf(?:inity)?)(?=\s*[,}])",
                  lambda m: m.group(1) + ("NaN" if m.group(3).lower() == "nan" else m.group(2) + "Infinity"),
                  line, flags=re.I)
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def last_json_line(text, key):
    """The last JSON object in text that has key (amptrain --bench and torch scripts print one)."""
    found = None
    for line in text.splitlines():
        obj = parse_json_object(line)
        if obj is not None and key in obj:
            found = obj
    return found


def read_metrics(path, prog):
    """amptrain's metrics file (log.metrics): {"steps": [step records], "evals": [eval records],
    "summary": the last {"summary": true} record or None, "headers": the {"header": true} record each start
    writes first}. A line that is not a JSON object is a UsageError naming the file and line, except an
    unfinished last line of a run still writing it."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise UsageError(f"cannot read metrics file '{path}': {e.strerror}")
    run = {"steps": [], "evals": [], "summary": None, "headers": []}
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        obj = parse_json_object(line)
        if obj is None:
            if number == len(lines):  # no newline after it: the run is writing it right now
                print(f"{prog}: {path}:{number}: unfinished last line left out", file=sys.stderr)
                break
            raise UsageError(f"{path}:{number}: not a JSON object: {line[:80]}")
        if obj.get("header"):
            run["headers"].append(obj)
        elif obj.get("summary"):
            run["summary"] = obj
        elif obj.get("eval"):
            run["evals"].append(obj)
        elif "step" in obj:
            run["steps"].append(obj)
        else:
            raise UsageError(f"{path}:{number}: neither a header, a step, an eval nor a summary record: {line[:80]}")
    if not run["steps"] and run["summary"] is None:
        raise UsageError(f"{path}: no step records (is it an amptrain log.metrics file?)")
    return run


def number(v):
    """v as a float, or None for missing, null and non-finite values."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


# ---- matplotlib --------------------------------------------------------------------------------------------


def pyplot(prog, still="the CSV and markdown are written"):
    """matplotlib.pyplot with the file-only Agg backend, or None when it is not installed (said on stderr,
    with what the script still writes)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"{prog}: {MPL_MISSING}: no PNG is drawn; {still}", file=sys.stderr)
        return None
    return plt


def save_figure(plt, fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _series(records, key):
    """(steps, values) of the records that have key; null and non-finite values become NaN (a gap)."""
    xs = [r["step"] for r in records if key in r]
    return xs, [float("nan") if number(r[key]) is None else number(r[key]) for r in records if key in r]


def skipped_marks(steps):
    """Where skipped steps happened, as (step, scale) of each logged step at which the count of skipped
    steps grew (records are written every log.every steps), and the count at the end."""
    marks, seen = [], 0
    for r in steps:
        total = number(r.get("skipped_total"))
        if total is None:
            continue
        if total > seen and number(r.get("scale")) is not None:
            marks.append((r["step"], r["scale"]))
        seen = total
    return marks, seen


def plot_metrics(plt, runs, path, title):
    """The training curves of one or more runs (runs: [(label, read_metrics(...))]) against the step, one
    color per run: loss (train solid, eval dashed with dots), learning rate, loss scale with the skipped
    steps marked (x at the logged step where the count of skipped steps grew), images/s, step time and
    eval top-1."""
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5))
    ax_loss, ax_lr, ax_scale, ax_ips, ax_ms, ax_top1 = axes.flat
    for k, (label, run) in enumerate(runs):
        color = f"C{k % 10}"
        steps, evals = run["steps"], run["evals"]
        ax_loss.plot(*_series(steps, "loss"), color=color, lw=1.2, label=f"{label} train")
        if evals:
            ax_loss.plot(*_series(evals, "loss"), color=color, ls="--", marker="o", ms=4, label=f"{label} eval")
            xs, top1 = _series(evals, "top1")
            ax_top1.plot(xs, [100 * v for v in top1], color=color, marker="o", ms=4, label=label)
        ax_lr.plot(*_series(steps, "lr"), color=color, label=label)
        ax_scale.plot(*_series(steps, "scale"), color=color, drawstyle="steps-post", label=label)
        marks, total = skipped_marks(steps)
        if marks:
            ax_scale.plot([s for s, _ in marks], [v for _, v in marks], "x", color=color, ms=9, mew=2,
                          label=f"{label}: {total:g} skipped")
        ax_ips.plot(*_series(steps, "images_per_s"), color=color, label=label)
        ax_ms.plot(*_series(steps, "step_ms"), color=color, label=label)
    panels = ((ax_loss, "loss"), (ax_lr, "learning rate"), (ax_scale, "loss scale (x: skipped steps)"),
              (ax_ips, "images/s"), (ax_ms, "step time (ms)"), (ax_top1, "eval top-1 (%)"))
    for ax, name in panels:
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    ax_loss.set_yscale("log")  # the loss spans decades once a run learns
    ax_scale.set_yscale("log", base=2)
    for ax in (ax_ips, ax_ms):
        ax.set_ylim(bottom=0)
    if not any(run["evals"] for _, run in runs):
        ax_top1.text(0.5, 0.5, "no evaluation records", ha="center", va="center", transform=ax_top1.transAxes)
    for ax in (ax_loss, ax_scale):
        ax.legend(fontsize=8)
    fig.suptitle(title)
    save_figure(plt, fig, path)
