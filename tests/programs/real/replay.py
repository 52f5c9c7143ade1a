"""A replay buffer in numpy, one environment: the module sac_train.py and td3_train.py import
as CleanRL's scripts import stable-baselines3's ``ReplayBuffer`` (not installed here):
``add`` one transition, ``sample`` a uniform batch as tensors on the device."""
import numpy as np
import torch

FIELDS = ("obs", "next_obs", "actions", "rewards", "dones")


class ReplayBuffer:
    def __init__(self, size, obs_dim, act_dim):
        self.size, self.pos, self.filled = size, 0, 0
        self.buf = {"obs": np.zeros((size, obs_dim), np.float32), "next_obs": np.zeros((size, obs_dim), np.float32),
                    "actions": np.zeros((size, act_dim), np.float32), "rewards": np.zeros(size, np.float32),
                    "dones": np.zeros(size, np.float32)}

    def add(self, obs, next_obs, actions, rewards, dones):
        for key, value in zip(FIELDS, (obs, next_obs, actions, rewards, dones)):
            self.buf[key][self.pos] = value
        self.pos, self.filled = (self.pos + 1) % self.size, min(self.filled + 1, self.size)

    def sample(self, batch_size, device):
        """(observations, next observations, actions, rewards, dones), each a tensor on ``device``."""
        idx = np.random.randint(0, self.filled, size=batch_size)
        return tuple(torch.as_tensor(self.buf[k][idx]).to(device) for k in FIELDS)
