#!/usr/bin/env bash
# ZeRO-Infinity's offload to NVMe (offload_optimizer and offload_param {"device": "nvme"}), as
# users run it: mpirun -np N tessera train. Checks:
#  - ZeRO-1/2/3 (float32 and bf16; AdamW and SGD with momentum) at 1, 2 and 4 ranks, with
#    sub-groups, one or several buffers, pipelined reads and writes, fast_init, and the aio
#    section's shapes, and a 2-stage pipeline with ZeRO-1; ZeRO-3 with its parameter shards
#    swapped (offload_param nvme: some kept in memory by max_in_cpu, or none), alone and with
#    the optimizer's state, and with offload_param cpu, and with accumulation, dropout,
#    activation checkpointing, fp16 and evaluation between steps: every one of 20 losses and
#    the validation loss bit for bit equal to the same run without offload;
#  - the "memory" figures: no moment (and, in 16-bit training, no float32 master) in memory
#    between steps, parameters in memory as `tessera estimate-memory` says, the swap files'
#    bytes equal to its disk, the swap's staging within its bound; the process's peak RSS
#    lower by what went to disk;
#  - checkpoints save and load across offload settings (nvme -> none, none -> nvme), a job
#    killed with -9 mid-run resumes from its last checkpoint, and no swap file is left behind;
#  - faults: a file-size limit (the write fails with EFBIG) is an error naming the swap file and
#    the offset, for the optimizer's and the parameters' swap; a bad nvme_path, aio key or
#    offload_param outside stage 3 is an error naming the key.
set -euo pipefail
tessera="$1"; fixtures="$2"
work="$(mktemp -d)"; trap 'pkill -9 -f "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
export XDG_CACHE_HOME="$work/cache" OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cp "$fixtures/corpus.txt" "$work/corpus.txt"
mkdir -p "$work/swap"

python3 - "$fixtures/train_dist.json" "$work" <<'PY'
import json, sys
base = json.load(open(sys.argv[1])); work = sys.argv[2]
nv = {"device": "nvme", "nvme_path": work + "/swap"}
sgd = {"type": "SGD", "params": {"lr": 3e-3, "momentum": 0.9}}
variants = {  # name: (zero_optimization, bf16, optimizer, aio)
    "z1": ({"stage": 1}, False, None, None),
    "z1nv": ({"stage": 1, "offload_optimizer": dict(nv, buffer_count=1)}, False, None, None),
    "z2": ({"stage": 2}, False, None, None),
    "z2nv": ({"stage": 2, "sub_group_size": 3000, "offload_optimizer": dict(
        nv, buffer_count=2, pipeline_read=True, pipeline_write=True)}, False, None, None),
    "z2aio": ({"stage": 2, "sub_group_size": 5000, "offload_optimizer": dict(nv, pipeline_read=True)},
              False, None, {"block_size": 4096, "queue_depth": 1, "thread_count": 2,
                            "single_submit": True, "overlap_events": False}),
    "z3": ({"stage": 3}, False, None, None),
    "z3nv": ({"stage": 3, "sub_group_size": 2000, "offload_optimizer": dict(
        nv, fast_init=True, pipeline_write=True)}, False, None, None),
    "z2bf": ({"stage": 2}, True, None, None),
    "z2bfnv": ({"stage": 2, "offload_optimizer": nv}, True, None, None),
    "z3bf": ({"stage": 3}, True, None, None),
    "z3bfnv": ({"stage": 3, "sub_group_size": 3000, "offload_optimizer": dict(nv, pipeline_read=True)},
               True, None, None),
    "z2sgd": ({"stage": 2}, False, sgd, None),
    "z2sgdnv": ({"stage": 2, "sub_group_size": 4000, "offload_optimizer": dict(nv, pipeline_read=True)},
                False, sgd, None),
    # offload_param: the shards of the parameters, gathered on use (reuse distance 0: each
    # gather released after its use, the shard read again before the next)
    "z3pnv": ({"stage": 3, "stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 4000,
               "offload_param": dict(nv, buffer_count=2, buffer_size=4096, max_in_cpu=5000)},
              False, None, None),
    "z3inf": ({"stage": 3, "sub_group_size": 3000, "offload_param": dict(nv, max_in_cpu=0),
               "offload_optimizer": dict(nv, pipeline_read=True)}, False, None, None),
    "z3bfinf": ({"stage": 3, "stage3_max_live_parameters": 3000, "offload_param": dict(
        nv, buffer_count=3, buffer_size=4096, max_in_cpu=0), "offload_optimizer": nv},
                True, None, None),
    "z3pcpu": ({"stage": 3, "offload_param": {"device": "cpu", "pin_memory": True}}, False, None, None),
    "pp": ({"stage": 1}, False, None, None),  # (2 pipeline stages: below)
    "ppnv": ({"stage": 1, "sub_group_size": 3000, "offload_optimizer": dict(nv, pipeline_read=True)},
             False, None, None),
}
for name, (z, bf16, opt, aio) in variants.items():
    c = json.loads(json.dumps(base))
    c.pop("comms_logger")
    c["zero_optimization"].update(z)
    if bf16: c["bf16"] = {"enabled": True}
    if opt: c["optimizer"] = opt
    if aio: c["aio"] = aio
    if name.startswith("pp"): c["pipeline"] = {"stages": 2}
    c["csv_monitor"]["output_path"] = work + "/csv"
    json.dump(c, open(f"{work}/{name}.json", "w"))
# ZeRO-Infinity among the rest: accumulation, dropout, activation checkpointing, fp16 loss
# scaling and evaluation between steps (gathers on use, off the prefetch order).
for name, src in (("z3x", "z3"), ("z3xinf", "z3inf")):
    c = json.load(open(f"{work}/{src}.json"))
    c.update({"train_micro_batch_size_per_gpu": 2, "activation_checkpointing": {},
              "fp16": {"enabled": True, "initial_scale_power": 12}})
    c["model"]["dropout"] = 0.1
    c["train"]["eval_interval"] = 5
    c["zero_optimization"].update({"stage3_max_reuse_distance": 5000, "stage3_prefetch_bucket_size": 3000})
    json.dump(c, open(f"{work}/{name}.json", "w"))
PY

train() {  # config ranks job [args...]: losses in csv/<job>/, the last JSON line per rank in <job>.jsonl
  local cfg="$work/$1.json" n=$2 job=$3; shift 3
  sed "s#\"job_name\": \"[^\"]*\"#\"job_name\": \"$job\"#" "$cfg" > "$work/$job.json"
  if [ "$n" = 1 ]; then "$tessera" train "$work/$job.json" --data "$work/corpus.txt" --json "$@" >"$work/$job.out" 2>"$work/$job.err"
  else mpirun -np "$n" "$tessera" train "$work/$job.json" --data "$work/corpus.txt" --json "$@" >"$work/$job.out" 2>"$work/$job.err"; fi \
    || { cat "$work/$job.err"; exit 1; }
  grep '^{' "$work/$job.out" > "$work/$job.jsonl" || true
  "$tessera" estimate-memory "$work/$job.json" --ranks "$n" --data "$work/corpus.txt" --json 2>/dev/null | tail -1 > "$work/$job.est"
}

# Under the sanitizers (scripts/test_sanitizers.sh) 2 ranks and the three stages only.
pairs="z1:z1nv z2:z2nv z2:z2aio z3:z3nv z2bf:z2bfnv z3bf:z3bfnv z2sgd:z2sgdnv z3:z3pnv z3:z3inf z3bf:z3bfinf z3:z3pcpu"
sizes="1 2"; four="z2:z2nv z3:z3nv z3:z3inf"
[ -z "${TESSERA_SANITIZER_SUBSET:-}" ] || {
  pairs="z1:z1nv z2:z2nv z3:z3nv z2bf:z2bfnv z3bf:z3bfnv z3:z3inf z3bf:z3bfinf"; sizes=2; four=""; }
for n in $sizes; do for p in $pairs; do
  train "${p%%:*}" "$n" "${p%%:*}-$n"; train "${p##*:}" "$n" "${p##*:}-$n"
done; done
for p in $four; do train "${p%%:*}" 4 "${p%%:*}-4"; train "${p##*:}" 4 "${p##*:}-4"; done
train pp 2 pp-2; train ppnv 2 ppnv-2  # a pipeline of 2 stages, ZeRO-1 over each stage's replicas
train z3x 2 z3x-2; train z3xinf 2 z3xinf-2

# Checkpoints across offload settings (2 ranks, ZeRO-2): 10 steps saved with one, 10 resumed with the other.
train z2nv 2 save-nv --steps 10 --save "$work/ck-nv"
train z2 2 resume-plain --resume "$work/ck-nv"
train z2 2 save-plain --steps 10 --save "$work/ck-plain"
train z2nv 2 resume-nv --resume "$work/ck-plain"
# bf16 (the float32 masters swapped too): saved with nvme, resumed with nvme and without.
train z2bfnv 2 save-bfnv --steps 10 --save "$work/ck-bfnv"
train z2bfnv 2 resume-bfnv --resume "$work/ck-bfnv"
train z2bf 2 resume-bf --resume "$work/ck-bfnv"
# ZeRO-Infinity (parameters and optimizer state swapped): saved and resumed across settings.
train z3inf 2 save-inf --steps 10 --save "$work/ck-inf"
train z3 2 resume-z3 --resume "$work/ck-inf"
train z3 2 save-z3 --steps 10 --save "$work/ck-z3"
train z3inf 2 resume-inf --resume "$work/ck-z3"

python3 - "$work" "$sizes" "$pairs" "$four" <<'PY'
import csv, json, sys
work, sizes, pairs, four = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
def losses(job):  # {step: loss as written (%.9g: the float32 exactly)}
    with open(f"{work}/csv/{job}/Train_Samples_train_loss.csv") as f:
        return {int(r["step"]) // 8: r["train_loss"] for r in csv.DictReader(f)}
def last(job): return [json.loads(l) for l in open(f"{work}/{job}.jsonl")]
fails = 0
def report(ok, text):
    global fails
    fails += not ok
    print(text + (" ok" if ok else " FAIL"))
runs = [(p, n) for n in sizes for p in pairs] + [(p, "4") for p in four] + [("pp:ppnv", "2"), ("z3x:z3xinf", "2")]
for p, n in runs:
    ref, nv = p.split(":")
    a, b = losses(f"{ref}-{n}"), losses(f"{nv}-{n}")
    la, lb = last(f"{ref}-{n}"), last(f"{nv}-{n}")
    same = len(a) == 20 and a == b and [l["val_loss"] for l in la] == [l["val_loss"] for l in lb]
    est = json.load(open(f"{work}/{nv}-{n}.est"))["memory"]
    mem = [l["memory"] for l in lb]
    disk = all(m["disk"] == est["disk"] and m["optimizer"] == est["optimizer"] and
               m["params"] == est["params"] and m["swap"] <= est["swap"] for m in mem)
    if nv != "z3pcpu": disk = disk and all(m["disk"] > 0 and m["swap"] > 0 for m in mem)
    if nv in ("z3inf", "z3bfinf"): disk = disk and all(m["params"] == 0 for m in mem)
    if nv == "ppnv":  # (the estimate's figures are the largest stage's: each stage's own here)
        disk = all(m["disk"] > 0 and m["swap"] > 0 for m in mem)
    fp32 = "bf" not in nv  # float32 stages 1-2 keep no master apart: nothing in memory
    if fp32 and not nv.startswith("z3"): disk = disk and all(m["optimizer"] == 0 for m in mem)
    report(same, f"{nv:8s} N={n}: 20 losses and the validation loss bit for bit equal to {ref}")
    report(disk, f"{nv:8s} N={n}: memory {mem[0]}; estimate params {est['params']}, disk "
                 f"{est['disk']}, optimizer {est['optimizer']}, swap at most {est['swap']}")
for job, saved, ref in (("resume-plain", "save-nv", "z2-2"), ("resume-nv", "save-plain", "z2-2"),
                        ("resume-bfnv", "save-bfnv", "z2bf-2"), ("resume-bf", "save-bfnv", "z2bf-2"),
                        ("resume-z3", "save-inf", "z3-2"), ("resume-inf", "save-z3", "z3-2")):
    got, first, straight = losses(job), losses(saved), losses(ref)
    ok = sorted(got) == list(range(11, 21)) and all(got[s] == straight[s] for s in got) \
        and all(first[s] == straight[s] for s in first)
    report(ok, f"{saved} -> {job}: steps 11-20 bit for bit equal to the straight run")
sys.exit(1 if fails else 0)
PY

# Peak RSS (the kernel's count, not Tessera's): a 42.5M-parameter GPT-2 at ZeRO-3, float32, one
# rank, with everything Tessera can swap on disk (parameter shards, masters, moments, gradients)
# against the same run in memory, which holds its float32 state (16 bytes a parameter: the
# shards that are the masters, the gradients, two moments). The run on disk must
#  - hold less by at least 80% of what went to disk, net of the swap's staging (the freed memory
#    leaves the process: mapped blocks, not malloc's heap);
#  - run to its end under a memory limit of half that state (in a cgroup made for it where this
#    machine lets the test make one, v2 or v1: the kernel kills a process that passes it) with
#    the same losses, its peak RSS under the limit whether or not a cgroup enforced it. (What
#    bounds it: the model built whole once before ZeRO partitions it, then the buffers, the
#    swap's staging and the activations; docs/parallelism.md.)
[ -n "${TESSERA_SANITIZER_SUBSET:-}" ] || python3 - "$tessera" "$work" "$fixtures/train_dist.json" <<'PY'
import json, os, subprocess, sys
tessera, work, base = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
base.pop("comms_logger"); base.pop("csv_monitor")
base["model"].update({"n_layer": 6, "n_embd": 768, "n_head": 4, "block_size": 32})
base["train"]["steps"] = 2; base["train_batch_size"] = 4
nv = {"device": "nvme", "nvme_path": work + "/swap"}
fetch = {"stage": 3, "stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 300000,
         "sub_group_size": 300000}

def make_cgroup(limit):  # (its directory, "v2" or "v1"), or None where no cgroup can be made
    name = f"tessera-test-{os.getpid()}"
    for root, version, key in (("/sys/fs/cgroup", "v2", "memory.max"),
                               ("/sys/fs/cgroup/memory", "v1", "memory.limit_in_bytes")):
        if version == "v2" and not os.path.exists(root + "/cgroup.controllers"): continue
        try: os.mkdir(f"{root}/{name}")
        except OSError: continue
        try:
            with open(f"{root}/{name}/{key}", "w") as f: f.write(str(limit))
        except OSError:
            os.rmdir(f"{root}/{name}"); continue
        for swap, value in (("memory.swap.max", "0"), ("memory.memsw.limit_in_bytes", str(limit))):
            try:  # (no escape to swap space, where the machine has any)
                with open(f"{root}/{name}/{swap}", "w") as f: f.write(value)
            except OSError: pass
        return f"{root}/{name}", version
    return None

def train(name, cgroup=None):  # (exit status, peak RSS in bytes, last JSON line, stderr)
    cmd = [tessera, "train", f"{work}/rss-{name}.json", "--data", f"{work}/corpus.txt", "--json"]
    if cgroup:  # (the shell joins the group, then becomes tessera: the same process)
        cmd = ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "sh"] + cmd
    with open(f"{work}/rss-{name}.err", "w") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        out = p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)
    lines = [l for l in out.splitlines() if l.startswith("{")]
    return (os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024,
            json.loads(lines[-1]) if lines else None, open(f"{work}/rss-{name}.err").read())

runs = {}
for name, z in (("memory", {}), ("disk", {"offload_param": dict(nv, max_in_cpu=0, buffer_count=2,
                                                                 buffer_size=300000),
                                          "offload_optimizer": nv})):
    c = json.loads(json.dumps(base)); c["zero_optimization"].update(fetch, **z)
    json.dump(c, open(f"{work}/rss-{name}.json", "w"))
    runs[name] = train(name)
    assert runs[name][0] == 0, f"rss-{name}: exit status {runs[name][0]}\n{runs[name][3]}"
(_, rss_mem, r_mem, _), (_, rss_disk, r_disk, _) = runs["memory"], runs["disk"]
m_mem, m_disk = r_mem["memory"], r_disk["memory"]
held = lambda m: m["params"] + m["grads"] + m["optimizer"]
moved = held(m_mem) - held(m_disk) - m_disk["swap"]
saved = rss_mem - rss_disk
ok = saved >= 0.8 * moved
print(f"peak RSS in memory {rss_mem / 2**20:.1f} MB, on disk {rss_disk / 2**20:.1f} MB: "
      f"{saved / 2**20:.1f} MB less for {moved / 2**20:.1f} MB swapped net of staging "
      f"({m_disk['disk'] / 2**20:.1f} MB on disk)" + (" ok" if ok else " FAIL"))

state = held(m_mem)  # (float32, in memory: 16 bytes a parameter)
limit = state // 2
cg = make_cgroup(limit)
try:
    status, peak, r, err = train("disk", cg[0] if cg else None)
finally:
    if cg: os.rmdir(cg[0])
how = f"a cgroup ({cg[1]}) memory limit" if cg else "a limit on its peak RSS (no cgroup can be made here)"
limited = status == 0 and peak < limit and r is not None and \
    (r["train_loss"], r["val_loss"]) == (r_mem["train_loss"], r_mem["val_loss"])
print(f"ZeRO-Infinity under {how} of {limit / 2**20:.1f} MB, half the {state / 2**20:.1f} MB "
      f"float32 state: exit status {status}, peak RSS {peak / 2**20:.1f} MB, losses equal to the "
      f"run in memory" + (" ok" if limited else " FAIL\n" + err[-3000:]))
sys.exit(0 if ok and limited else 1)
PY

# Killed with -9 mid-run (checkpoints every 2 steps): the last checkpoint resumes, and the
# swap files' space went with the processes (they are unlinked at creation).
python3 -c "
import json; c=json.load(open('$work/z2nv.json')); c['train'].update({'steps': 10**6, 'checkpoint_interval': 2,
  'checkpoint_dir': '$work/ck-kill'}); json.dump(c, open('$work/kill.json','w'))"
mpirun -np 2 "$tessera" train "$work/kill.json" --data "$work/corpus.txt" >"$work/kill.out" 2>&1 &
for _ in $(seq 1 300); do [ -f "$work/ck-kill/latest" ] && break; sleep 0.1; done
sleep 1; pkill -9 -f "tessera train $work/kill.json" || true; wait 2>/dev/null || true
[ -f "$work/ck-kill/latest" ] || { echo "kill -9: no checkpoint was written"; cat "$work/kill.out"; exit 1; }
sed -i 's/"checkpoint_interval": 2/"checkpoint_interval": 0/' "$work/kill.json"
tag=$(cat "$work/ck-kill/latest"); at=${tag##*[!0-9]}
mpirun -np 2 "$tessera" train "$work/kill.json" --data "$work/corpus.txt" --resume "$work/ck-kill" \
  --steps $((at + 2)) >"$work/kill-resume.out" 2>&1 || { cat "$work/kill-resume.out"; exit 1; }
grep -q "resum" "$work/kill-resume.out" || { echo "kill -9: the resume did not say so"; cat "$work/kill-resume.out"; exit 1; }
[ -z "$(ls -A "$work/swap")" ] || { echo "swap files left behind: $(ls "$work/swap")"; exit 1; }
echo "kill -9 mid-run: resumed from $tag, no swap file left ok"

# Faults and bad configs: clear errors.
fails=0
expect() {  # what config-args: the run fails and its error contains what
  local what="$1"; shift
  if out=$("$@" 2>&1); then echo "expected an error containing '$what', the run succeeded"; fails=$((fails + 1))
  elif grep -qF -- "$what" <<<"$out"; then echo "error names '$what' ok"
  else echo "expected '$what' in: $out"; fails=$((fails + 1)); fi
}
variant() {  # name python-edit: a z2nv config edited by the python statement (c is the config)
  python3 -c "import json; c=json.load(open('$work/z2nv.json')); $2; json.dump(c, open('$work/$1.json','w'))"
}
variant nopath "del c['zero_optimization']['offload_optimizer']['nvme_path']"
expect "'zero_optimization.offload_optimizer.nvme_path'" "$tessera" train "$work/nopath.json" --data "$work/corpus.txt" --steps 1
variant filepath "c['zero_optimization']['offload_optimizer']['nvme_path'] = '$work/corpus.txt'"
expect "offload_optimizer.nvme_path" "$tessera" train "$work/filepath.json" --data "$work/corpus.txt" --steps 1
variant blocksize "c['aio'] = {'block_size': 1000}"
expect "'aio.block_size'" "$tessera" train "$work/blocksize.json" --data "$work/corpus.txt" --steps 1
variant buffers "c['zero_optimization']['offload_optimizer']['buffer_count'] = 0"
expect "'zero_optimization.offload_optimizer.buffer_count'" "$tessera" train "$work/buffers.json" --data "$work/corpus.txt" --steps 1
variant onebit "c['optimizer'] = {'type': 'OneBitAdam', 'params': {'lr': 1e-3, 'freeze_step': 2}}"
expect "offload_optimizer.device \"nvme\"" "$tessera" train "$work/onebit.json" --data "$work/corpus.txt" --steps 1
variant stage0 "c['zero_optimization']['stage'] = 0"
expect "needs ZeRO stage 1, 2 or 3" "$tessera" train "$work/stage0.json" --data "$work/corpus.txt" --steps 1
# A file-size limit: the swap's first write past it fails with EFBIG (SIGXFSZ ignored).
expect "of swap file '$work/swap/tessera-optimizer-rank0-" bash -c "trap '' XFSZ; ulimit -f 64; exec '$tessera' train '$work/z2nv.json' --data '$work/corpus.txt' --steps 2"
expect "of swap file '$work/swap/tessera-param-rank0-" bash -c "trap '' XFSZ; ulimit -f 64; exec '$tessera' train '$work/z3pnv.json' --data '$work/corpus.txt' --steps 2"
python3 -c "import json; c=json.load(open('$work/z3pnv.json')); c['zero_optimization']['stage'] = 2; json.dump(c, open('$work/pstage2.json','w'))"
expect "offload_param" "$tessera" train "$work/pstage2.json" --data "$work/corpus.txt" --steps 1
python3 -c "import json; c=json.load(open('$work/z3pnv.json')); del c['zero_optimization']['offload_param']['nvme_path']; json.dump(c, open('$work/pnopath.json','w'))"
expect "'zero_optimization.offload_param.nvme_path'" "$tessera" train "$work/pnopath.json" --data "$work/corpus.txt" --steps 1
# nvme-tune: every shape timed, the best section parses as a config's, nothing left behind.
"$tessera" nvme-tune "$work/swap" --size 8 --quick --json 2>"$work/tune.err" | tail -1 > "$work/tune.json"
python3 - "$work" <<'PY' || fails=$((fails + 1))
import json, sys
work = sys.argv[1]
t = json.load(open(f"{work}/tune.json"))
assert len(t["results"]) == 8 and all(r["read_gbps"] > 0 and r["write_gbps"] > 0 for r in t["results"]), t
assert sorted(t["aio"]) == sorted(["block_size", "queue_depth", "thread_count", "single_submit", "overlap_events"]), t
assert t["read_gbps"] + t["write_gbps"] == max(r["read_gbps"] + r["write_gbps"] for r in t["results"]), t
assert t["swapper_read_ratio"] > 0 and t["swapper_write_ratio"] > 0, t
c = json.load(open(f"{work}/z2nv.json")); c["aio"] = t["aio"]; json.dump(c, open(f"{work}/tuned.json", "w"))
print(f"nvme-tune: 8 shapes, best {t['aio']}, swapper at {t['swapper_read_ratio']:.2f} / "
      f"{t['swapper_write_ratio']:.2f} of raw read / write ok")
PY
"$tessera" train "$work/tuned.json" --data "$work/corpus.txt" --steps 2 >/dev/null 2>&1 || { echo "the tuned aio section does not train"; fails=$((fails + 1)); }
expect "nvme-tune DIR" "$tessera" nvme-tune "$work/corpus.txt" --quick
expect "--size must be in [1, 65536] MB" "$tessera" nvme-tune "$work/swap" --size 0
[ -z "$(ls -A "$work/swap")" ] || { echo "swap files left behind after errors"; fails=$((fails + 1)); }
[ "$fails" = 0 ]
