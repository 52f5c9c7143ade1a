#!/usr/bin/env python3
"""DQN as CleanRL's single-file ``dqn.py`` writes it: one loop over ``global_step``, per
step an epsilon-greedy action (a random one with probability epsilon, annealed linearly,
else ``torch.argmax(q_network(torch.Tensor(obs).to(device)), dim=1).cpu().numpy()``),
``envs.step(actions)`` on the host, the transition into a replay buffer (numpy arrays);
after ``--learning-starts`` steps, every ``--train-frequency``-th step one update: a sampled
batch moved to the device, the TD target from the target network under ``no_grad``,
``F.mse_loss``, ``optimizer.zero_grad()``, ``loss.backward()``, ``optimizer.step()``, and
every ``--target-network-frequency``-th step the target network's soft update
(``target_param.data.copy_(tau * q + (1 - tau) * target)``); a log line with CleanRL's
``SPS`` every ``--log-every`` steps. The QNetwork is CleanRL's MLP (120, 84). CartPole
from ``cartpole.py`` (gym is not installed here).

Its own timer: ``time.perf_counter()`` at every step, and CleanRL's SPS over the training
phase (after ``--learning-starts``): RESULT's ``sps``, ``ms_per_env_step``,
``ms_per_update_period`` (one update and the ``--train-frequency`` environment steps
around it: the mean time from one update's ``zero_grad`` to the next's), ``updates``.

    python dqn_train.py                            # CleanRL's defaults, shortened: 1 env, 20000 steps
    python dqn_train.py --device cpu --total-timesteps 3000 --learning-starts 1000
"""
import argparse
import json
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

from cartpole import CartPoleVecEnv

p = argparse.ArgumentParser(description="CleanRL's DQN on CartPole")
p.add_argument("--device", default="cuda")
p.add_argument("--seed", type=int, default=1)
p.add_argument("--num-envs", type=int, default=1)
p.add_argument("--total-timesteps", type=int, default=20000)
p.add_argument("--learning-rate", type=float, default=2.5e-4)
p.add_argument("--buffer-size", type=int, default=10000)
p.add_argument("--gamma", type=float, default=0.99)
p.add_argument("--tau", type=float, default=1.0)
p.add_argument("--target-network-frequency", type=int, default=500)
p.add_argument("--batch-size", type=int, default=128)
p.add_argument("--start-e", type=float, default=1.0)
p.add_argument("--end-e", type=float, default=0.05)
p.add_argument("--exploration-fraction", type=float, default=0.5)
p.add_argument("--learning-starts", type=int, default=5000)
p.add_argument("--train-frequency", type=int, default=10)
p.add_argument("--log-every", type=int, default=1000)
args = p.parse_args()


class QNetwork(nn.Module):
    def __init__(self, obs_dim, n_actions):
        super().__init__()
        self.network = nn.Sequential(nn.Linear(obs_dim, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, n_actions))

    def forward(self, x):
        return self.network(x)


class ReplayBuffer:
    """stable-baselines3's ReplayBuffer as CleanRL uses it: numpy arrays, a batch sampled
    at random and moved to the device."""

    def __init__(self, size, obs_dim, num_envs, device):
        self.obs = np.zeros((size, num_envs, obs_dim), dtype=np.float32)
        self.next_obs = np.zeros_like(self.obs)
        self.actions = np.zeros((size, num_envs), dtype=np.int64)
        self.rewards = np.zeros((size, num_envs), dtype=np.float32)
        self.dones = np.zeros((size, num_envs), dtype=np.float32)
        self.size, self.pos, self.full, self.device = size, 0, False, device

    def add(self, obs, next_obs, actions, rewards, dones):
        for arr, value in ((self.obs, obs), (self.next_obs, next_obs), (self.actions, actions), (self.rewards, rewards), (self.dones, dones)):
            arr[self.pos] = value
        self.pos = (self.pos + 1) % self.size
        self.full = self.full or self.pos == 0

    def sample(self, batch_size):
        idx = np.random.randint(0, self.size if self.full else self.pos, size=batch_size)
        env = np.random.randint(0, self.obs.shape[1], size=batch_size)
        def to(a):
            return torch.as_tensor(a[idx, env]).to(self.device)
        return to(self.obs), to(self.actions).unsqueeze(1), to(self.next_obs), to(self.dones), to(self.rewards)


def linear_schedule(start_e, end_e, duration, t):
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


random.seed(args.seed)
np.random.seed(args.seed)
torch.manual_seed(args.seed)
device = torch.device(args.device)
cuda = device.type == "cuda"
envs = CartPoleVecEnv(args.num_envs, args.seed)
obs_dim, n_actions = envs.single_observation_space_shape[0], envs.single_action_space_n
q_network = QNetwork(obs_dim, n_actions).to(device)
optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate)
target_network = QNetwork(obs_dim, n_actions).to(device)
target_network.load_state_dict(q_network.state_dict())
rb = ReplayBuffer(args.buffer_size, obs_dim, args.num_envs, device)

start_time = time.time()
obs, _ = envs.reset()
updates, update_at, step_times = 0, [], []
for global_step in range(args.total_timesteps):
    t0 = time.perf_counter()
    epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
    if random.random() < epsilon:
        actions = np.array([random.randrange(n_actions) for _ in range(envs.num_envs)])
    else:
        q_values = q_network(torch.Tensor(obs).to(device))
        actions = torch.argmax(q_values, dim=1).cpu().numpy()
    next_obs, rewards, terminations, truncations, infos = envs.step(actions)
    rb.add(obs, next_obs, actions, rewards, terminations)
    obs = next_obs
    if global_step > args.learning_starts:
        if global_step == args.learning_starts + 1:
            train_start, train_step0 = time.time(), global_step
        if global_step % args.train_frequency == 0:
            observations, acts, next_observations, dones, rews = rb.sample(args.batch_size)
            with torch.no_grad():
                target_max, _ = target_network(next_observations).max(dim=1)
                td_target = rews.flatten() + args.gamma * target_max * (1 - dones.flatten())
            old_val = q_network(observations).gather(1, acts).squeeze()
            loss = F.mse_loss(td_target, old_val)
            if global_step % args.log_every == 0:
                print(f"step {global_step} loss {loss.item():.4f} q {old_val.mean().item():.3f} "
                      f"SPS: {int(global_step / (time.time() - start_time))}")
            update_at.append(time.perf_counter())  # where its zero_grad comes
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            updates += 1
        if global_step % args.target_network_frequency == 0:
            for target_param, q_network_param in zip(target_network.parameters(), q_network.parameters()):
                target_param.data.copy_(args.tau * q_network_param.data + (1.0 - args.tau) * target_param.data)
    if cuda:
        torch.cuda.synchronize()
    step_times.append((time.perf_counter() - t0) * 1e3)

train_steps = args.total_timesteps - train_step0
sps = train_steps / (time.time() - train_start)
periods = np.diff(update_at) * 1e3
print("RESULT " + json.dumps({
    "sps": round(sps, 1), "ms_per_env_step": float(np.mean(step_times[train_step0:])), "updates": updates,
    "ms_per_update_period": float(periods.mean()), "ms_update_periods": periods.tolist(), "ms_per_step": float(periods.mean()),
    "env_steps": args.total_timesteps, "learning_starts": args.learning_starts, "device": args.device}))
