#!/usr/bin/env python3
"""TD3 as CleanRL's single-file ``td3_continuous_action.py`` writes it: one loop over
``global_step``, per step an action (random before ``--learning-starts``, else the
deterministic ``actor(torch.Tensor(obs).to(device))`` plus Gaussian exploration noise, to
numpy), ``envs.step`` on the host, the transition into a numpy replay buffer (``replay.py``, for stable-baselines3's); after the
learning starts, every step a critic update (two Q-networks; the target action from the
target actor with clipped noise, the target from the target critics, under ``no_grad``;
``q_optimizer.zero_grad()``, ``backward``, ``q_optimizer.step()``), and every
``--policy-frequency``-th step ONE actor update (``actor_optimizer``: the delayed policy
update, not compensated as SAC's) followed by the soft update of all three target
networks; a log line with CleanRL's ``SPS`` every ``--log-every`` steps. Two Adam
optimizers, one stepping every environment step, the other every second. Pendulum-v1's
equations vectorised in numpy (gym is not installed here).

Its own timer: ``time.perf_counter()`` per environment step: RESULT's ``ms_each`` (every
step; ``warmup``: those before the learning starts), ``ms_per_step`` (their mean after),
``sps`` over the training phase, ``q_updates``, ``actor_updates``.

    python td3_train.py                            # CleanRL's sizes, shortened: 1 env, 10000 steps
    python td3_train.py --device cpu --total-timesteps 600 --learning-starts 200
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

p = argparse.ArgumentParser(description="CleanRL's TD3 on Pendulum")
p.add_argument("--device", default="cuda")
p.add_argument("--seed", type=int, default=1)
p.add_argument("--total-timesteps", type=int, default=10000)
p.add_argument("--buffer-size", type=int, default=100000)
p.add_argument("--gamma", type=float, default=0.99)
p.add_argument("--tau", type=float, default=0.005)
p.add_argument("--batch-size", type=int, default=256)
p.add_argument("--learning-starts", type=int, default=5000)
p.add_argument("--learning-rate", type=float, default=3e-4)
p.add_argument("--policy-noise", type=float, default=0.2)
p.add_argument("--exploration-noise", type=float, default=0.1)
p.add_argument("--noise-clip", type=float, default=0.5)
p.add_argument("--policy-frequency", type=int, default=2)
p.add_argument("--hidden", type=int, default=256)
p.add_argument("--log-every", type=int, default=100)
args = p.parse_args()


class QNetwork(nn.Module):
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


class Actor(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden, scale):
        super().__init__()
        self.fc1 = nn.Linear(obs_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc_mu = nn.Linear(hidden, act_dim)
        self.register_buffer("action_scale", torch.tensor(scale, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor(0.0))

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = torch.tanh(self.fc_mu(x))
        return x * self.action_scale + self.action_bias


random.seed(args.seed)
np.random.seed(args.seed)
torch.manual_seed(args.seed)
device = torch.device(args.device)
cuda = device.type == "cuda"
env = PendulumEnv(args.seed)
obs_dim, act_dim, max_action = 3, 1, PendulumEnv.max_torque
actor = Actor(obs_dim, act_dim, args.hidden, max_action).to(device)
qf1, qf2 = QNetwork(obs_dim, act_dim, args.hidden).to(device), QNetwork(obs_dim, act_dim, args.hidden).to(device)
qf1_target, qf2_target = QNetwork(obs_dim, act_dim, args.hidden).to(device), QNetwork(obs_dim, act_dim, args.hidden).to(device)
target_actor = Actor(obs_dim, act_dim, args.hidden, max_action).to(device)
target_actor.load_state_dict(actor.state_dict())
qf1_target.load_state_dict(qf1.state_dict())
qf2_target.load_state_dict(qf2.state_dict())
q_optimizer = optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.learning_rate)
actor_optimizer = optim.Adam(list(actor.parameters()), lr=args.learning_rate)

rb = ReplayBuffer(args.buffer_size, obs_dim, act_dim)
start_time = time.time()
obs, _ = env.reset()
times, q_updates, actor_updates = [], 0, 0
for global_step in range(args.total_timesteps):
    t0 = time.perf_counter()
    if global_step < args.learning_starts:
        actions = np.array([[random.uniform(-max_action, max_action)]], dtype=np.float32)
    else:
        with torch.no_grad():
            actions = actor(torch.Tensor(obs).to(device))
            actions += torch.normal(0, actor.action_scale * args.exploration_noise)
            actions = actions.cpu().numpy().clip(-max_action, max_action)
    next_obs, rewards, terminations, truncations, infos = env.step(actions)
    real_next_obs = infos["final_observation"] if truncations[0] else next_obs
    rb.add(obs[0], real_next_obs[0], actions[0], rewards[0], float(terminations[0]))
    obs = next_obs
    if global_step > args.learning_starts:
        b_obs, b_next, b_act, b_rew, b_done = rb.sample(args.batch_size, device)
        with torch.no_grad():
            clipped_noise = (torch.randn_like(b_act, device=device) * args.policy_noise).clamp(
                -args.noise_clip, args.noise_clip) * target_actor.action_scale
            next_state_actions = (target_actor(b_next) + clipped_noise).clamp(-max_action, max_action)
            qf1_next_target = qf1_target(b_next, next_state_actions)
            qf2_next_target = qf2_target(b_next, next_state_actions)
            min_qf_next_target = torch.min(qf1_next_target, qf2_next_target)
            next_q_value = b_rew.flatten() + (1 - b_done.flatten()) * args.gamma * min_qf_next_target.view(-1)
        qf1_a_values = qf1(b_obs, b_act).view(-1)
        qf2_a_values = qf2(b_obs, b_act).view(-1)
        qf_loss = F.mse_loss(qf1_a_values, next_q_value) + F.mse_loss(qf2_a_values, next_q_value)
        q_optimizer.zero_grad()
        qf_loss.backward()
        q_optimizer.step()
        q_updates += 1
        if global_step % args.policy_frequency == 0:
            actor_loss = -qf1(b_obs, actor(b_obs)).mean()
            actor_optimizer.zero_grad()
            actor_loss.backward()
            actor_optimizer.step()
            actor_updates += 1
            # update the target networks
            for param, target_param in zip(actor.parameters(), target_actor.parameters()):
                target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
            for param, target_param in zip(qf1.parameters(), qf1_target.parameters()):
                target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
            for param, target_param in zip(qf2.parameters(), qf2_target.parameters()):
                target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
        if global_step % args.log_every == 0:
            print(f"step {global_step} qf_loss {qf_loss.item():.3f} SPS: {int(global_step / (time.time() - start_time))}")
        if global_step == args.learning_starts + 1:
            train_start = time.time()
    if cuda:
        torch.cuda.synchronize()
    times.append((time.perf_counter() - t0) * 1e3)

trained = times[args.learning_starts + 1:]
print("RESULT " + json.dumps({
    "ms_each": times, "warmup": args.learning_starts + 1, "ms_per_step": float(np.mean(trained)),
    "sps": round((len(trained) - 1) / (time.time() - train_start), 1), "q_updates": q_updates, "actor_updates": actor_updates,
    "learning_starts": args.learning_starts, "env_steps": args.total_timesteps, "device": args.device}))
