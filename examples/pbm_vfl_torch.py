"""PBM-VFL with your own torch modules: digits cut into image quadrants, a small CNN for three quadrants, an MLP
for the fourth, a fusion MLP at the server; every party a real MPyC process.  Usage: [EPOCHS [CHECKPOINT]]."""
import sys

import torch
from torch import nn

from sqm.apps.pbm_vfl import PBMVFL, Client, Server, load_split

P = 16  # embedding size


class QuadrantCNN(nn.Module):  # a 4 x 4 pixel quadrant -> P values in [-1, 1]
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Unflatten(1, (1, 4, 4)), nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(128, P), nn.Tanh())

    def forward(self, x):
        return self.net(x)


torch.manual_seed(0)
x_train, x_test, y_train, y_test, n_classes = load_split("digits", 4)  # 4 clients, 16 pixels each
mlp = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, P), nn.Tanh())
modules = [QuadrantCNN(), QuadrantCNN(), QuadrantCNN(), mlp]
clients = [Client(m, x_train[j], x_test[j], torch.optim.Adam(m.parameters(), lr=0.01)) for j, m in enumerate(modules)]
fusion = nn.Sequential(nn.Linear(P, 32), nn.ReLU(), nn.Linear(32, n_classes))
server = Server(fusion, y_train, y_test, loss=nn.CrossEntropyLoss())
vfl = PBMVFL(clients, server, b=16, beta=0.15, batch_size=100, epochs=int(sys.argv[1]) if len(sys.argv) > 1 else 10)
for m in vfl.fit(progress=True):
    print(f"epoch {m['epoch']}: test accuracy {m['test_accuracy']:.4f}")
print(f"feature-level epsilon {vfl.accountant.epsilon():.1f} at delta {vfl.cfg.delta:g}")
vfl.save(sys.argv[2] if len(sys.argv) > 2 else "pbm_vfl.pt")  # every party's trained module and optimizer
