"""A 🤗 Trainer run on digits whose options come from the environment (the tests set them); prints its weights' sha256."""
import os, signal
import torch
from torch import nn
from sklearn.datasets import load_digits
from transformers import Trainer, TrainerCallback, TrainingArguments
import spotrun
E = os.environ.get

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 10))
    def forward(self, pixels, labels=None):
        logits = self.body(pixels)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}

class Digits(torch.utils.data.Dataset):
    def __init__(self, n, noise=False):
        d = load_digits()
        self.x = torch.tensor(d.data[:n] / 16.0, dtype=torch.float32); self.y = torch.tensor(d.target[:n]); self.noise = noise
    def __len__(self): return len(self.y)
    def __getitem__(self, i):
        x = self.x[i]
        if self.noise: x = x + 0.1 * torch.randn(64)
        return {"pixels": x, "labels": self.y[i]}

class Notice(TrainerCallback):  # under torchrun, only rank 1 gets the notice
    def on_step_end(self, args, state, control, **_):
        if state.global_step == int(E("NOTICE_AT_STEP", "-1")) and E("RANK", "1") == "1":
            os.kill(os.getpid(), signal.SIGTERM)
    def on_save(self, args, state, control, **_):
        print("saved", state.global_step, flush=True)
    def on_evaluate(self, args, state, control, **_):
        print("evaluated", state.global_step, flush=True)
        if E("NOTICE_AT_EVAL") and state.global_step == int(E("NOTICE_AT_EVAL")):
            os.kill(os.getpid(), signal.SIGTERM)

spot = spotrun.TrainerCheckpoints(every_seconds=None)
kw = dict(output_dir=E("OUTPUT_DIR"), per_device_train_batch_size=16, learning_rate=0.05, seed=7, report_to=[],
          use_cpu=True, disable_tqdm=True, logging_strategy="no",
          gradient_accumulation_steps=int(E("GA", "1")), save_strategy=E("SAVE", "no"),
          dataloader_num_workers=int(E("WORKERS", "0")), warmup_steps=int(E("WARMUP", "0")),
          lr_scheduler_type=E("SCHED", "linear"))
if E("SAVE_STEPS"): kw["save_steps"] = int(E("SAVE_STEPS"))
if E("MAX_STEPS"): kw["max_steps"] = int(E("MAX_STEPS"))
if E("EPOCHS"): kw["num_train_epochs"] = float(E("EPOCHS"))
if E("EVAL"): kw.update(eval_strategy=E("EVAL"), eval_steps=int(E("EVAL_STEPS", "10")), per_device_eval_batch_size=20)
if E("BEST"): kw.update(load_best_model_at_end=True, metric_for_best_model="loss", greater_is_better=E("GREATER") == "1")
if E("PERSIST"): kw["dataloader_persistent_workers"] = True
if E("DATA_SEED"): kw["data_seed"] = int(E("DATA_SEED"))
args = TrainingArguments(**kw)
torch.manual_seed(7)
n = int(E("N", "200"))
trainer = Trainer(Net(), args, train_dataset=Digits(n, E("NOISE") == "1"), eval_dataset=Digits(60, E("EVAL_NOISE") == "1") if E("EVAL") else None,
                  callbacks=[spot, Notice()])
start = spot.resume_from()
print(f"starting from {start or 'scratch'}", flush=True)
trainer.train(resume_from_checkpoint=start)
spot.exit_if_stopped()
print(f"weights sha256: {spotrun.weights_sha256(trainer.model.state_dict())} at {trainer.state.global_step}", flush=True)
if "RANK" in os.environ:  # torchrun on CPU: gloo may abort a rank in the interpreter's exit (the note in sdk/hf_trainer.py)
    os._exit(0)
