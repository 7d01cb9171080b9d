"""What the CLI tests that compare runs share: a run's csv_monitor values and losses, a
relative closeness test, and checks that print their outcome and count failures.
(Imported by the test scripts' inline Python: `sys.path.insert(0, TOOLS_DIR)`.)"""
import csv
import json
import os

fails = 0


def ran(job):
    """Whether the job ran (the sanitizer pass leaves some to the release pass)."""
    return os.path.exists(job + ".out")


def monitor(job, name):
    """The csv_monitor's Train/Samples/NAME values by global step (its x axis is samples)."""
    rows = csv.reader(open(f"monitors/{job}/Train_Samples_{name}.csv"))
    next(rows)
    return [float(v) for _, v in rows]


def losses(job):
    """Every step's training loss (the ranks' mean), then the final validation loss."""
    final = [json.loads(line) for line in open(job + ".out") if line.startswith('{"step"')][0]
    return monitor(job, "train_loss") + [final["val_loss"]]


def close(run, ref, tol):
    return len(run) == len(ref) and all(abs(u - v) <= tol * abs(v) for u, v in zip(run, ref))


def check(ok, what):
    global fails
    fails += not ok
    print(f"{what}{'' if ok else ' FAIL'}")


def finish():
    """Exits with the number of failed checks."""
    raise SystemExit(fails)


def schedule_test_configs(train_small):
    """The 16-step runs the training-schedule tests vary: tests/fixtures/train_small.json on
    corpus.txt, blocks of 32, batches of 8 in 2 micro-batches, dropout 0.1, a monitor line each
    step; and a 3-layer BERT of the same size."""
    c = json.load(open(train_small))
    c["data"]["path"] = "corpus.txt"
    c["train_batch_size"], c["gradient_accumulation_steps"], c["steps_per_print"] = 8, 2, 1
    c["model"].update({"block_size": 32, "n_head": 4, "dropout": 0.1})
    c["train"].update({"steps": 16, "sample_tokens": 0, "eval_interval": 8})
    c["scheduler"]["params"]["total_num_steps"] = 16
    bert = {"type": "bert", "n_layer": 3, "n_head": 4, "n_embd": 32, "block_size": 32,
            "dropout": 0.1}
    return c, bert
