#!/usr/bin/env python3
"""SAC as CleanRL's single-file ``sac_continuous_action.py`` writes it: one loop over
``global_step``, per step an action (random before ``--learning-starts``, else
``actor.get_action(torch.Tensor(obs).to(device))``), ``envs.step`` on the host, the
transition into a numpy replay buffer (``replay.py``, for stable-baselines3's); after the learning starts, every step a critic
update (two Q-networks, the target from the target networks and the entropy term under
``no_grad``, ``q_optimizer.zero_grad()``, ``backward``, ``q_optimizer.step()``), and every
``--policy-frequency``-th step that many actor updates (TD3's delayed update, compensated),
each followed by the entropy temperature's own update (``a_optimizer``, ``--autotune``);
the target networks' soft update every ``--target-network-frequency`` steps; a log line
with CleanRL's ``SPS`` every ``--log-every`` steps. Three Adam optimizers step at three
rates. Pendulum-v1's equations vectorised in numpy (gym is not installed here).

Its own timer: ``time.perf_counter()`` per environment step: RESULT's ``ms_each`` (every
step; ``warmup``: those before the learning starts), ``ms_per_step`` (their mean after), ``sps`` over the training
phase, ``q_updates``, ``actor_updates``.

    python sac_train.py                            # CleanRL's sizes, shortened: 1 env, 10000 steps
    python sac_train.py --device cpu --total-timesteps 600 --learning-starts 200
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

from pendulum import PendulumEnv  # beside this script
from replay import ReplayBuffer  # beside this script

p = argparse.ArgumentParser(description="CleanRL's SAC on Pendulum")
p.add_argument("--device", default="cuda")
p.add_argument("--seed", type=int, default=1)
p.add_argument("--total-timesteps", type=int, default=10000)
p.add_argument("--buffer-size", type=int, default=100000)
p.add_argument("--gamma", type=float, default=0.99)
p.add_argument("--tau", type=float, default=0.005)
p.add_argument("--batch-size", type=int, default=256)
p.add_argument("--learning-starts", type=int, default=5000)
p.add_argument("--policy-lr", type=float, default=3e-4)
p.add_argument("--q-lr", type=float, default=1e-3)
p.add_argument("--policy-frequency", type=int, default=2)
p.add_argument("--target-network-frequency", type=int, default=1)
p.add_argument("--autotune", type=int, default=1)
p.add_argument("--hidden", type=int, default=256)
p.add_argument("--log-every", type=int, default=100)
args = p.parse_args()


class SoftQNetwork(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(obs_dim + act_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, 1)

    def forward(self, x, a):
        x = torch.cat([x, a], 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


LOG_STD_MAX, LOG_STD_MIN = 2, -5


class Actor(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden, scale):
        super().__init__()
        self.fc1 = nn.Linear(obs_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc_mean = nn.Linear(hidden, act_dim)
        self.fc_logstd = nn.Linear(hidden, act_dim)
        self.register_buffer("action_scale", torch.tensor(scale, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor(0.0))

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        mean = self.fc_mean(x)
        log_std = torch.tanh(self.fc_logstd(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
        return mean, log_std

    def get_action(self, x):
        mean, log_std = self(x)
        std = log_std.exp()
        normal = torch.distributions.Normal(mean, std)
        x_t = normal.rsample()
        y_t = torch.tanh(x_t)
        action = y_t * self.action_scale + self.action_bias
        log_prob = normal.log_prob(x_t)
        log_prob -= torch.log(self.action_scale * (1 - y_t.pow(2)) + 1e-6)
        log_prob = log_prob.sum(1, keepdim=True)
        mean = torch.tanh(mean) * self.action_scale + self.action_bias
        return action, log_prob, mean


random.seed(args.seed)
np.random.seed(args.seed)
torch.manual_seed(args.seed)
device = torch.device(args.device)
cuda = device.type == "cuda"
env = PendulumEnv(args.seed)
obs_dim, act_dim, max_action = 3, 1, PendulumEnv.max_torque
actor = Actor(obs_dim, act_dim, args.hidden, max_action).to(device)
qf1, qf2 = SoftQNetwork(obs_dim, act_dim, args.hidden).to(device), SoftQNetwork(obs_dim, act_dim, args.hidden).to(device)
qf1_target, qf2_target = SoftQNetwork(obs_dim, act_dim, args.hidden).to(device), SoftQNetwork(obs_dim, act_dim, args.hidden).to(device)
qf1_target.load_state_dict(qf1.state_dict())
qf2_target.load_state_dict(qf2.state_dict())
q_optimizer = optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.q_lr)
actor_optimizer = optim.Adam(list(actor.parameters()), lr=args.policy_lr)
if args.autotune:
    target_entropy = -float(act_dim)
    log_alpha = torch.zeros(1, requires_grad=True, device=device)
    alpha = log_alpha.exp().item()
    a_optimizer = optim.Adam([log_alpha], lr=args.q_lr)
else:
    alpha = 0.2

rb = ReplayBuffer(args.buffer_size, obs_dim, act_dim)
start_time = time.time()
obs, _ = env.reset()
times, q_updates, actor_updates = [], 0, 0
for global_step in range(args.total_timesteps):
    t0 = time.perf_counter()
    if global_step < args.learning_starts:
        actions = np.array([[random.uniform(-max_action, max_action)]], dtype=np.float32)
    else:
        actions, _, _ = actor.get_action(torch.Tensor(obs).to(device))
        actions = actions.detach().cpu().numpy()
    next_obs, rewards, terminations, truncations, infos = env.step(actions)
    real_next_obs = infos["final_observation"] if truncations[0] else next_obs
    rb.add(obs[0], real_next_obs[0], actions[0], rewards[0], float(terminations[0]))
    obs = next_obs
    if global_step > args.learning_starts:
        b_obs, b_next, b_act, b_rew, b_done = rb.sample(args.batch_size, device)
        with torch.no_grad():
            next_state_actions, next_state_log_pi, _ = actor.get_action(b_next)
            qf1_next_target = qf1_target(b_next, next_state_actions)
            qf2_next_target = qf2_target(b_next, next_state_actions)
            min_qf_next_target = torch.min(qf1_next_target, qf2_next_target) - alpha * next_state_log_pi
            next_q_value = b_rew.flatten() + (1 - b_done.flatten()) * args.gamma * min_qf_next_target.view(-1)
        qf1_a_values = qf1(b_obs, b_act).view(-1)
        qf2_a_values = qf2(b_obs, b_act).view(-1)
        qf_loss = F.mse_loss(qf1_a_values, next_q_value) + F.mse_loss(qf2_a_values, next_q_value)
        q_optimizer.zero_grad()
        qf_loss.backward()
        q_optimizer.step()
        q_updates += 1
        if global_step % args.policy_frequency == 0:  # TD3 delayed update support
            for _ in range(args.policy_frequency):  # compensate for the delay by doing 'policy_frequency' times
                pi, log_pi, _ = actor.get_action(b_obs)
                min_qf_pi = torch.min(qf1(b_obs, pi), qf2(b_obs, pi))
                actor_loss = ((alpha * log_pi) - min_qf_pi).mean()
                actor_optimizer.zero_grad()
                actor_loss.backward()
                actor_optimizer.step()
                actor_updates += 1
                if args.autotune:
                    with torch.no_grad():
                        _, log_pi, _ = actor.get_action(b_obs)
                    alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()
                    a_optimizer.zero_grad()
                    alpha_loss.backward()
                    a_optimizer.step()
                    alpha = log_alpha.exp().item()
        if global_step % args.target_network_frequency == 0:
            for param, target_param in zip(qf1.parameters(), qf1_target.parameters()):
                target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
            for param, target_param in zip(qf2.parameters(), qf2_target.parameters()):
                target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
        if global_step % args.log_every == 0:
            print(f"step {global_step} qf_loss {qf_loss.item():.3f} actor_loss {actor_loss.item():.3f} alpha {alpha:.3f} "
                  f"SPS: {int(global_step / (time.time() - start_time))}")
        if global_step == args.learning_starts + 1:
            train_start = time.time()
    if cuda:
        torch.cuda.synchronize()
    times.append((time.perf_counter() - t0) * 1e3)

trained = times[args.learning_starts + 1:]
print("RESULT " + json.dumps({
    "ms_each": times, "warmup": args.learning_starts + 1, "ms_per_step": float(np.mean(trained)), "sps": round((len(trained) - 1) / (time.time() - train_start), 1),
    "q_updates": q_updates, "actor_updates": actor_updates, "learning_starts": args.learning_starts,
    "env_steps": args.total_timesteps, "device": args.device}))
