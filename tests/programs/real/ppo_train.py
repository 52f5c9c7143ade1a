#!/usr/bin/env python3
"""PPO as CleanRL's single-file ``ppo.py`` writes it: per iteration a rollout of
``--num-steps`` steps of ``--num-envs`` vectorised environments (``with torch.no_grad():
action, logprob, _, value = agent.get_action_and_value(next_obs)``, ``envs.step(action.cpu()
.numpy())`` on the host), GAE advantages under ``no_grad`` (``agent.get_value``), then
``--update-epochs`` epochs of ``--num-minibatches`` shuffled minibatches, each
``optimizer.zero_grad()``, the clipped surrogate + value + entropy loss, ``backward()``,
``clip_grad_norm_``, ``optimizer.step()`` (``--zero-grad after``: ``zero_grad`` after the
step, as torchrl's PPO tutorial orders them; ``--advantages per-epoch``: GAE again before
each epoch, as that tutorial calls its advantage module); the learning rate annealed per
iteration. The ``Agent`` has no ``forward``: its methods call ``self.actor`` and
``self.critic`` (``nn.Sequential``). gym is not installed here: the environments are CartPole-v1's
equations, vectorised in numpy with auto-reset, as ``gym.vector.SyncVectorEnv`` steps them.

Its own timer: CleanRL's ``SPS`` (global steps / elapsed) and ``time.perf_counter()`` per
iteration (its rollout and its update); RESULT's ``ms_per_step`` the mean iteration after
the first.

    python ppo_train.py                         # CleanRL's defaults: 4 envs x 128 steps, 4 epochs x 4 minibatches
    python ppo_train.py --device cpu --num-envs 4 --num-steps 32 --iterations 8
"""
import argparse
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.distributions.categorical import Categorical

from cartpole import CartPoleVecEnv


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim, n_actions, hidden):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, hidden)), nn.Tanh(),
            layer_init(nn.Linear(hidden, hidden)), nn.Tanh(),
            layer_init(nn.Linear(hidden, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, hidden)), nn.Tanh(),
            layer_init(nn.Linear(hidden, hidden)), nn.Tanh(),
            layer_init(nn.Linear(hidden, n_actions), std=0.01),
        )

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        logits = self.actor(x)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def main():
    p = argparse.ArgumentParser(description="PPO (CleanRL's ppo.py) on a vectorised CartPole")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--learning-rate", type=float, default=2.5e-4)
    p.add_argument("--anneal-lr", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--clip-coef", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--device", default="cuda")
    p.add_argument("--zero-grad", default="before", choices=["before", "after"], help="zero_grad before the backward or after the step")
    p.add_argument("--advantages", default="once", choices=["once", "per-epoch"],
                   help="GAE once per rollout, or again before each epoch (torchrl's PPO tutorial)")
    args = p.parse_args()
    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches

    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    envs = CartPoleVecEnv(args.num_envs, args.seed)
    agent = Agent(4, 2, args.hidden).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    # ALGO Logic: Storage setup
    obs = torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space_shape).to(device)
    actions = torch.zeros((args.num_steps, args.num_envs)).to(device)
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
    dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)

    global_step = 0
    start_time = time.time()
    next_obs, _ = envs.reset()
    next_obs = torch.Tensor(next_obs).to(device)
    next_done = torch.zeros(args.num_envs).to(device)
    ms_each, episodes = [], []

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    for iteration in range(1, args.iterations + 1):
        t0 = time.perf_counter()
        # Annealing the rate if instructed to do so.
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done

            # ALGO LOGIC: action logic
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

            # TRY NOT TO MODIFY: execute the game and log data.
            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            next_done = np.logical_or(terminations, truncations)
            rewards[step] = torch.tensor(reward).to(device).view(-1)
            next_obs, next_done = torch.Tensor(next_obs).to(device), torch.Tensor(next_done).to(device)
            if "episode_return" in infos:
                episodes.extend(infos["episode_return"].tolist())

        def advantages_and_returns():
            # bootstrap value if not done
            with torch.no_grad():
                next_value = agent.get_value(next_obs).reshape(1, -1)
                advantages = torch.zeros_like(rewards).to(device)
                lastgaelam = 0
                for t in reversed(range(args.num_steps)):
                    if t == args.num_steps - 1:
                        nextnonterminal = 1.0 - next_done
                        nextvalues = next_value
                    else:
                        nextnonterminal = 1.0 - dones[t + 1]
                        nextvalues = values[t + 1]
                    delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                    advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
                returns = advantages + values
            return advantages.reshape(-1), returns.reshape(-1)

        # flatten the batch
        b_obs = obs.reshape((-1,) + envs.single_observation_space_shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape(-1)
        b_values = values.reshape(-1)
        b_advantages, b_returns = advantages_and_returns()

        # Optimizing the policy and value network
        b_inds = np.arange(batch_size)
        clipfracs = []
        for epoch in range(args.update_epochs):
            if args.advantages == "per-epoch" and epoch:
                b_advantages, b_returns = advantages_and_returns()
            np.random.shuffle(b_inds)
            for start in range(0, batch_size, minibatch_size):
                end = start + minibatch_size
                mb_inds = b_inds[start:end]

                _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions.long()[mb_inds])
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()

                with torch.no_grad():
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]

                mb_advantages = b_advantages[mb_inds]
                mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                # Policy loss
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                # Value loss
                newvalue = newvalue.view(-1)
                v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

                if args.zero_grad == "before":
                    optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
                if args.zero_grad == "after":
                    optimizer.zero_grad()

        y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
        sync()
        ms_each.append((time.perf_counter() - t0) * 1e3)
        sps = int(global_step / (time.time() - start_time))
        recent = np.mean(episodes[-10:]) if episodes else float("nan")
        print(f"iteration={iteration} global_step={global_step} SPS={sps} episodic_return={recent:.1f} "
              f"approx_kl={approx_kl.item():.4f} clipfrac={np.mean(clipfracs):.3f} explained_variance={explained_var:.3f}")

    ms = sum(ms_each[1:]) / max(len(ms_each) - 1, 1)
    print("RESULT " + json.dumps({"program": "ppo_train", "step": "PPO iteration (rollout and update)",
                                  "ms_per_step": round(ms, 4), "ms_per_iter": round(ms, 4), "iterations": args.iterations,
                                  "sps": round(args.num_envs * args.num_steps / ms * 1e3, 1),
                                  "optimizer_steps": args.iterations * args.update_epochs * args.num_minibatches,
                                  "rollout_steps_per_iter": args.num_steps, "ms_each": [round(m, 4) for m in ms_each],
                                  "device": str(device)}))


if __name__ == "__main__":
    main()
