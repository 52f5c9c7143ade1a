#!/usr/bin/env python3
"""REINFORCE as pytorch/examples' ``reinforcement_learning/reinforce.py`` writes it: a policy
network, ``select_action`` (a ``Categorical`` sample) per environment step, and
``finish_episode`` (the discounted returns, one Adam step) per episode, on CartPole-v1
(``cartpole.py``'s dynamics, one copy: gym is not installed here). Episodes end when the pole
falls: 10 to 500 environment steps, longer as the policy learns. Its own timer: each episode,
rollout and update; RESULT's ``lengths``: each episode's environment steps.

    python reinforce.py --episodes 80
"""
import argparse
import json
import time
from collections import deque
from itertools import count

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

from cartpole import CartPoleVecEnv


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)
        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


def main():
    p = argparse.ArgumentParser(description="PyTorch REINFORCE example")
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--seed", type=int, default=543)
    p.add_argument("--episodes", type=int, default=80)
    p.add_argument("--log-interval", type=int, default=10)
    args = p.parse_args()
    env = CartPoleVecEnv(1, args.seed)
    torch.manual_seed(args.seed)
    policy = Policy()
    optimizer = optim.Adam(policy.parameters(), lr=1e-2)
    eps = np.finfo(np.float32).eps.item()

    def select_action(state):
        state = torch.from_numpy(state).float().unsqueeze(0)
        probs = policy(state)
        m = Categorical(probs)
        action = m.sample()
        policy.saved_log_probs.append(m.log_prob(action))
        return action.item()

    def finish_episode():
        R = 0
        policy_loss = []
        returns = deque()
        for r in policy.rewards[::-1]:
            R = r + args.gamma * R
            returns.appendleft(R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        for log_prob, R in zip(policy.saved_log_probs, returns):
            policy_loss.append(-log_prob * R)
        optimizer.zero_grad()
        policy_loss = torch.cat(policy_loss).sum()
        policy_loss.backward()
        optimizer.step()
        del policy.rewards[:]
        del policy.saved_log_probs[:]

    running_reward = 10
    ms_each, lengths = [], []
    for i_episode in count(1):
        t0 = time.perf_counter()
        states, _ = env.reset()
        state, ep_reward = states[0], 0
        for t in range(1, 10000):  # Don't infinite loop while learning
            action = select_action(state)
            states, rewards, terminated, truncated, _ = env.step(np.array([action]))
            state, reward, done = states[0], float(rewards[0]), bool(terminated[0] or truncated[0])
            policy.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        finish_episode()
        ms_each.append((time.perf_counter() - t0) * 1e3)
        lengths.append(t)
        if i_episode % args.log_interval == 0:
            print(f"Episode {i_episode}\tLast reward: {ep_reward:.2f}\tAverage reward: {running_reward:.2f}")
        if i_episode >= args.episodes:
            break
    print("RESULT " + json.dumps({"program": "reinforce", "steps": len(ms_each), "ms_each": ms_each,
                                  "ms_per_step": sum(ms_each) / len(ms_each), "lengths": lengths}))


if __name__ == "__main__":
    main()
