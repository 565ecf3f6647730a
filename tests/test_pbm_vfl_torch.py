"""PBM-VFL as a torch library (sqm.apps.pbm_vfl.trainer): a user's own modules through real MPyC processes, save /
stop / resume against an uninterrupted run, the client's release as an autograd Function, bad input named."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from sqm.apps.pbm_vfl import PBMVFL, Client, Server, load_split  # noqa: E402
from sqm.apps.pbm_vfl.encoding import PBMRelease, release  # noqa: E402
from sqm.mpc.net.launch import MPCError  # noqa: E402
from sqm.mechanism import pbm  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "pbm_vfl_torch.py"


@pytest.mark.slow
def test_user_script_trains_a_cnn_and_an_mlp_through_real_processes(tmp_path):
    """The PBM-VFL guide's script (docs/how-to/pbm-vfl.md includes the file) (under 40 lines): three quadrant CNNs, one
    MLP with dropout and a fusion MLP, through five real MPyC party processes for 3 epochs; every party's trained module
    and optimizer come back."""
    assert len(SCRIPT.read_text().splitlines()) < 40
    ckpt = tmp_path / "ckpt.pt"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, str(SCRIPT), "3", str(ckpt)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    acc = [float(line.split()[-1]) for line in run.stdout.splitlines() if line.startswith("epoch ")]
    assert len(acc) == 3 and acc[-1] > 0.5, run.stdout  # chance: 0.1 (3 epochs gave 0.74 when written)
    state = torch.load(ckpt, weights_only=True)  # tensors and plain types only
    assert state["epoch"] == 3 and state["accountant"]["uses"] == 3 and len(state["clients"]) == 4
    cnn, mlp = state["clients"][0]["module"], state["clients"][3]["module"]
    assert cnn["net.1.weight"].shape == (8, 1, 3, 3) and mlp["0.weight"].shape == (64, 16)  # different modules
    steps = 3 * int(np.ceil(1437 / 100))  # digits: 1437 training records, batch 100
    for party in [state["server"]] + state["clients"]:  # every party's optimizer took every step
        assert {int(s["step"]) for s in party["optimizer"]["state"].values()} == {steps}


class HalfCNN(nn.Module):
    """The left half of a digit (8 x 4 pixels) -> P = 8 values in [-1, 1]."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Unflatten(1, (1, 8, 4)), nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(),
                                 nn.Flatten(), nn.Linear(128, 8), nn.Tanh())

    def forward(self, x):
        return self.net(x)


def _halves(n_train=300, n_test=60):
    btr, bte, ytr, yte, nc = load_split("digits", 1)
    img, timg = btr[0].reshape(-1, 8, 8), bte[0].reshape(-1, 8, 8)
    left = lambda a: np.ascontiguousarray(a[:, :, :4].reshape(len(a), 32))  # noqa: E731
    right = lambda a: np.ascontiguousarray(a[:, :, 4:].reshape(len(a), 32))  # noqa: E731
    return ([left(img)[:n_train], right(img)[:n_train]], [left(timg)[:n_test], right(timg)[:n_test]],
            ytr[:n_train], yte[:n_test], nc)


def _trainer(init_seed, backend="plain", **kw):
    """Two different client modules (a CNN, an MLP with dropout) and a fusion MLP, initialised by ``init_seed``."""
    xtr, xte, ytr, yte, nc = _halves()
    torch.manual_seed(init_seed)
    mlp = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 8), nn.Tanh())
    mods = [HalfCNN(), mlp]
    clients = [Client(m, xtr[j], xte[j], torch.optim.Adam(m.parameters(), lr=0.01)) for j, m in enumerate(mods)]
    fusion = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, nc))
    server = Server(fusion, ytr, yte, optimizer=torch.optim.SGD(fusion.parameters(), lr=0.1, momentum=0.9))
    return PBMVFL(clients, server, b=16, beta=0.2, epochs=3, batch_size=50, seed=7, backend=backend, **kw)


def _states(vfl):
    return [(p.module.state_dict(), p.optimizer.state_dict()) for p in [vfl.server] + vfl.clients]


def test_save_stop_resume_equals_an_uninterrupted_run(tmp_path, same_state):
    """3 epochs in one go (in process) against 2 epochs through real processes, a checkpoint on disk, a new
    trainer with differently initialised modules that loads it, and the last epoch in process: the same final
    modules and optimizer states bit for bit, the same metrics and the same privacy spent."""
    whole = _trainer(init_seed=1)
    whole.fit()
    assert whole.epoch == 3 and len(whole.history) == 3

    first = _trainer(init_seed=1, backend="mpyc")
    assert len(first.fit(2)) == 2 and first.accountant.uses == 2
    first.save(tmp_path / "ckpt.pt")
    first_states = _states(first)
    resumed = _trainer(init_seed=2)  # other initial weights: everything must come from the checkpoint
    assert not same_state(_states(resumed), first_states)
    resumed.load(tmp_path / "ckpt.pt")
    assert same_state(_states(resumed), first_states) and resumed.epoch == 2
    assert resumed.fit() == [whole.history[-1]]  # fit() runs the planned epochs left: epoch 3
    assert same_state(_states(resumed), _states(whole))
    assert resumed.history == whole.history
    assert resumed.accountant.uses == whole.accountant.uses == 3
    assert resumed.accountant.epsilon() == whole.accountant.epsilon() > 0
    # a fit that stopped after 1 epoch differs (the comparison can fail)
    short = _trainer(init_seed=1)
    short.fit(1)
    assert not same_state(_states(short), _states(whole))


def test_release_is_an_autograd_function_with_the_mechanisms_coins():
    """Forward: the integers are sqm.mechanism.pbm.encode's for the same stream (one sampler for numpy and torch), h
    their decoded contribution; backward: the gradient passes where |x| <= C and is zero where x was clipped.  Over many
    draws h is unbiased for clip(x) (fixed seed, 4 standard errors)."""
    x = torch.tensor([[0.5, -2.0, 0.9999, 1.5, -0.25]], requires_grad=True)
    h, q = PBMRelease.apply(x, 16, 0.25, 1.0, pbm.make_rng(3))
    assert q.dtype == torch.int64 and not q.requires_grad and bool(((q >= 0) & (q <= 16)).all())
    assert torch.equal(q, torch.as_tensor(pbm.encode(x.detach().numpy(), 16, 0.25, 1.0, pbm.make_rng(3)).q))
    assert torch.equal(h, ((1.0 / (0.25 * 16)) * (q.double() - 8)).float())
    g = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]])
    h.backward(g)
    assert torch.equal(x.grad, torch.tensor([[1.0, 0.0, 3.0, 0.0, 5.0]]))
    many = x.detach().expand(40000, 5)
    hs, _ = PBMRelease.apply(many, 16, 0.25, 1.0, pbm.make_rng(4))
    sd = np.sqrt(1.0 / (4 * 0.25 ** 2 * 16) / 40000)  # Theorem 2.3's bound per value, over 40000 draws
    assert np.all(np.abs(hs.double().mean(0).numpy() - np.clip(x.detach().numpy()[0], -1, 1)) < 4 * sd)
    # the baselines' release: the clipped embedding (LDP: plus Gaussian noise), clamp's gradient
    hc, msg, clipped = release(x, "npq", 16, 0.25, 1.0, pbm.make_rng(0))
    assert clipped == 2 and np.array_equal(msg, np.clip(x.detach().double().numpy(), -1, 1))
    _, noisy, _ = release(many, "ldp", 16, 0.25, 1.0, pbm.make_rng(5), sigma=2.0)
    assert abs(float(np.std(noisy - np.clip(many.double().numpy(), -1, 1))) - 2.0) < 0.02
    with pytest.raises(ValueError, match="NaN"):
        release(torch.tensor([[float("nan"), 0.0]]), "pbm", 16, 0.25, 1.0, pbm.make_rng(0))


def test_bad_input_is_refused_naming_the_party(tmp_path, same_state):
    xtr, xte, ytr, yte, nc = _halves(100, 20)

    def clients(*mods, xs=xtr, xt=xte):
        return [Client(m, xs[j], xt[j]) for j, m in enumerate(mods)]

    def server(out=nc, y=ytr, yt=yte):
        return Server(nn.Linear(8, out), y, yt)

    mlp = lambda p=8: nn.Sequential(nn.Linear(32, p), nn.Tanh())  # noqa: E731
    with pytest.raises(ValueError, match=r"sizes \[8, 6\]"):
        PBMVFL(clients(mlp(), mlp(6)), server())
    with pytest.raises(ValueError, match="client 2: its module maps"):
        PBMVFL(clients(mlp(), nn.Sequential(nn.Linear(32, 8), nn.Unflatten(1, (2, 4)))), server())
    with pytest.raises(ValueError, match="server: the fusion module"):
        PBMVFL(clients(mlp(), mlp()), server(out=1))
    with pytest.raises(ValueError, match="labels must be classes 0..4"):
        PBMVFL(clients(mlp(), mlp()), server(out=5))
    with pytest.raises(ValueError, match="client 2 holds 99/20 records.*misaligned"):
        PBMVFL(clients(mlp(), mlp(), xs=[xtr[0], xtr[1][:-1]]), server())
    bad = xtr[0].copy()
    bad[3, 3] = np.inf
    with pytest.raises(ValueError, match="client 1: x_train contains NaN or infinite"):
        PBMVFL(clients(mlp(), mlp(), xs=[bad, xtr[1]]), server())
    with pytest.raises(ValueError, match="at least two clients"):
        PBMVFL(clients(mlp()), server())
    with pytest.raises(ValueError, match="secure sum"):
        PBMVFL(clients(mlp(), mlp()), server(), secure_sum="xor")
    if not torch.cuda.is_available():
        c = clients(mlp(), mlp())
        c[1].device = "cuda"
        with pytest.raises(ValueError, match="client 2: device 'cuda' requested but torch sees no CUDA GPU"):
            PBMVFL(c, server())

    # a module that produces NaN while training: the job fails naming the client; nothing changes
    class Broken(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(32, 8)

        def forward(self, x):
            return self.lin(x) * (float("nan") if self.training else 1.0)

    vfl = PBMVFL(clients(mlp(), Broken()), server(), backend="plain", seed=0)
    before = [{k: v.clone() for k, v in p.module.state_dict().items()} for p in [vfl.server] + vfl.clients]
    with pytest.raises(MPCError, match="client 2.*NaN or infinite embeddings"):
        vfl.fit(1)
    assert vfl.epoch == 0 and vfl.accountant.uses == 0
    assert all(same_state(b, p.module.state_dict()) for b, p in zip(before, [vfl.server] + vfl.clients, strict=False))

    # checkpoints: only a PBM-VFL checkpoint for the same mechanism and modules of the same shapes
    good = PBMVFL(clients(mlp(), mlp()), server(), seed=0)
    good.save(tmp_path / "a.pt")
    with pytest.raises(ValueError, match="not a PBM-VFL checkpoint"):
        good.load_state_dict({"epoch": 1})
    with pytest.raises(ValueError, match="another mechanism.*'b': \\(16, 8\\)"):
        PBMVFL(clients(mlp(), mlp()), server(), b=8).load(tmp_path / "a.pt")
    with pytest.raises(ValueError, match="client 1: the checkpoint does not fit"):
        PBMVFL(clients(nn.Sequential(nn.Linear(32, 16), nn.Tanh(), nn.Linear(16, 8)), mlp()), server()).load(
            tmp_path / "a.pt")
    with pytest.raises(ValueError, match="epochs to train"):
        good.fit(0)


def test_each_party_program_carries_only_its_own_objects():
    """The server's program holds the fusion model, its optimizer, loss and labels and no client's rows or module;
    client j's holds its own module, optimizer and rows only; through the serialization a party process reads,
    the optimizer still drives that party's module."""
    import pickle

    vfl = _trainer(init_seed=1)
    progs = vfl._fit_programs(1)
    assert progs[0].model is vfl.server.module and progs[0].loss is vfl.server.loss
    assert progs[0].X_train is None and progs[0].X_test is None
    for j, c in enumerate(vfl.clients, start=1):
        assert progs[j].model is c.module and progs[j].optimizer is c.optimizer and progs[j].loss is None
        assert progs[j].y_train is None and progs[j].y_test is None and np.array_equal(progs[j].X_train, c.x_train)
    copy = pickle.loads(pickle.dumps(progs[1]))
    params = {id(p) for p in copy.model.parameters()}
    assert {id(p) for g in copy.optimizer.param_groups for p in g["params"]} == params
    assert type(copy.model).__name__ == "HalfCNN" and copy.model is not progs[1].model
