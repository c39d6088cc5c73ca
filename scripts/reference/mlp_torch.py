#!/usr/bin/env python3
"""Lockstep's dense/relu stacks (--model linear, mlp:w1,w2,..., or any list of dense and relu
layers ending in dense) as a PyTorch module, under the names lockstep-export writes.

    model = Mlp([784, 256, 128, 10])       # mlp:256,128 on 28x28x1 images and 10 classes
    model.load_state_dict(safetensors.torch.load_file("model.safetensors"))

The input is flattened as Lockstep's first dense layer reads it (a row of the file, channels last);
layers.<k> is the k-th dense layer (nn.Linear, weight (out, in)), a ReLU after every one but the
last. Mlp.from_state(state) takes the widths from a state dict's layers.<k>.weight shapes.
"""
import torch
import torch.nn as nn


class Mlp(nn.Module):
    def __init__(self, widths):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))

    @classmethod
    def from_state(cls, state):
        k, widths = 0, []
        while f"layers.{k}.weight" in state:
            out, inp = state[f"layers.{k}.weight"].shape
            widths = widths or [inp]
            widths.append(out)
            k += 1
        if not widths:
            raise ValueError("no layers.0.weight: not an exported dense/relu stack")
        return cls(widths)

    def forward(self, x):
        x = x.reshape(x.shape[0], -1)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = torch.relu(x)
        return x
