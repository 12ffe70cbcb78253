"""A Lightning run on digits whose options come from the environment (the tests set them); prints its weights' sha256."""
import os, signal
import lightning as L
import torch
from torch import nn
from sklearn.datasets import load_digits
from torch.utils.data import TensorDataset, DataLoader
import spotrun

E = os.environ.get
class Noisy(torch.utils.data.Dataset):
    def __init__(self, base): self.base = base
    def __len__(self): return len(self.base)
    def __getitem__(self, i):
        x, y = self.base[i]
        return x + 0.1 * torch.randn(64), y

def digits(n=None):
    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32); y = torch.tensor(d.target)
    if n: x, y = x[:n], y[:n]
    return Noisy(TensorDataset(x, y)) if E("NOISE") else TensorDataset(x, y)

MANUAL = E("MANUAL") == "1"
class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 10))
        self.head2 = nn.Linear(64, 10)
        if MANUAL: self.automatic_optimization = False
    def training_step(self, batch, i):
        x, y = batch
        if not MANUAL:
            return nn.functional.cross_entropy(self.body(x), y)
        o1, o2 = self.optimizers()
        l1 = nn.functional.cross_entropy(self.body(x), y)
        o1.zero_grad(); self.manual_backward(l1); o1.step()
        l2 = nn.functional.cross_entropy(self.head2(nn.functional.dropout(x, 0.2)), y)
        o2.zero_grad(); self.manual_backward(l2); o2.step()
        if E("MANUAL_SCHED"):
            s1, s2 = self.lr_schedulers()
            if self.trainer.is_last_batch:
                s1.step(); s2.step()
    def validation_step(self, batch, i):
        x, y = batch
        return nn.functional.cross_entropy(self.body(x), y)
    def configure_optimizers(self):
        o = torch.optim.SGD(self.body.parameters(), lr=0.05, momentum=0.9)
        if MANUAL:
            o2 = torch.optim.Adam(self.head2.parameters(), lr=0.01)
            if E("MANUAL_SCHED"):
                return [o, o2], [torch.optim.lr_scheduler.StepLR(o, 1, 0.5), torch.optim.lr_scheduler.StepLR(o2, 1, 0.5)]
            return [o, o2]
        s = torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5)
        return {"optimizer": o, "lr_scheduler": {"scheduler": s, "interval": E("SCHED", "epoch")}}

class Debug(L.Callback):
    def on_train_batch_start(self, trainer, m, b, i):
        if E("DEBUG"): print("batch", trainer.global_step, i, __import__("hashlib").md5(torch.random.get_rng_state().numpy().tobytes()).hexdigest()[:6], float(b[0].sum()), flush=True)
    def on_validation_start(self, trainer, m):
        if E("DEBUG"): print("val start", trainer.global_step, __import__("hashlib").md5(torch.random.get_rng_state().numpy().tobytes()).hexdigest()[:6], flush=True)
    def on_validation_end(self, trainer, m):
        if E("DEBUG"): print("val end", trainer.global_step, __import__("hashlib").md5(torch.random.get_rng_state().numpy().tobytes()).hexdigest()[:6], flush=True)

class Notice(L.Callback):  # under torchrun, only rank 1 gets the notice
    batches = 0; vbatches = 0
    def on_train_batch_end(self, trainer, *_):
        Notice.batches += 1
        if Notice.batches == int(E("NOTICE_AT_BATCH", "-1")) and E("RANK", "1") == "1":
            os.kill(os.getpid(), signal.SIGTERM)
    def on_validation_batch_end(self, trainer, *_):
        Notice.vbatches += 1
        if Notice.vbatches == int(E("NOTICE_AT_VBATCH", "-1")):
            os.kill(os.getpid(), signal.SIGTERM)

world, rank = int(E("WORLD_SIZE", "1")), int(E("RANK", "0"))  # under torchrun: DDP over gloo
L.seed_everything(7, verbose=False)
model = Net()
n = int(E("N", "400"))
if E("PLAIN"):
    loader = DataLoader(digits(n), batch_size=32, shuffle=True)
else:
    loader = spotrun.ResumableLoader(digits(n), batch_size=32, seed=7, drop_last=E("DROP_LAST") == "1", world_size=world, rank=rank,
                                     num_workers=int(E("WORKERS", "0")), persistent_workers=E("PERSIST") == "1" and int(E("WORKERS", "0")) > 0)
val = DataLoader(digits(100), batch_size=25, shuffle=E("VAL_SHUFFLE") == "1") if E("VAL") else None
spot = spotrun.LightningCheckpoints(every_steps=int(E("SAVE_STEPS", "100000")), every_seconds=None)
kw = {}
if E("VCI"): kw["val_check_interval"] = int(E("VCI"))
if E("MAX_EPOCHS"): kw["max_epochs"] = int(E("MAX_EPOCHS"))
kw.update(dict(strategy="ddp_find_unused_parameters_true", devices=world, num_nodes=1) if world > 1 else dict(devices=1))  # head2: MANUAL only
run = L.Trainer(max_steps=int(E("MAX_STEPS", "-1")), accelerator="cpu", logger=False, enable_checkpointing=False,
                enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                accumulate_grad_batches=int(E("ACC", "1")), callbacks=[Debug(), Notice(), spot], **kw)
start = spot.resume_from()
print(f"starting from {start or 'scratch'}", flush=True)
run.fit(model, loader, val, ckpt_path=start)
spot.exit_if_stopped()
print(f"weights sha256: {spotrun.weights_sha256(model.state_dict())} at {run.global_step} epoch {run.current_epoch}", flush=True)
if world > 1:  # gloo on CPU may abort a rank in the interpreter's exit after a run (the note in sdk/hf_trainer.py)
    os._exit(0)
