"""CartPole-v1 as ``gym.vector.SyncVectorEnv`` steps it (gym is not installed here): the
cart-pole equations, ``num_envs`` copies vectorised in numpy with auto-reset. Imported by
the reinforcement-learning programs beside it (``ppo_train.py``, ``dqn_train.py``) where
CleanRL imports gym."""
import numpy as np


class CartPoleVecEnv:
    """CartPole-v1 (gym's dynamics), ``num_envs`` copies stepped together, auto-reset."""

    def __init__(self, num_envs, seed):
        self.num_envs = num_envs
        self.rng = np.random.default_rng(seed)
        self.gravity, self.masscart, self.masspole, self.length = 9.8, 1.0, 0.1, 0.5
        self.total_mass = self.masspole + self.masscart
        self.polemass_length = self.masspole * self.length
        self.force_mag, self.tau = 10.0, 0.02
        self.theta_threshold_radians, self.x_threshold = 12 * 2 * np.pi / 360, 2.4
        self.single_observation_space_shape, self.single_action_space_n = (4,), 2

    def reset(self):
        self.state = self.rng.uniform(-0.05, 0.05, size=(self.num_envs, 4))
        self.steps = np.zeros(self.num_envs, dtype=np.int64)
        self.returns = np.zeros(self.num_envs)
        return self.state.astype(np.float32), {}

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state.T
        force = np.where(action == 1, self.force_mag, -self.force_mag)
        costheta, sintheta = np.cos(theta), np.sin(theta)
        temp = (force + self.polemass_length * theta_dot ** 2 * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta ** 2 / self.total_mass))
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x, x_dot = x + self.tau * x_dot, x_dot + self.tau * xacc
        theta, theta_dot = theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc
        self.state = np.stack([x, x_dot, theta, theta_dot], axis=1)
        self.steps += 1
        terminated = (np.abs(x) > self.x_threshold) | (np.abs(theta) > self.theta_threshold_radians)
        truncated = self.steps >= 500
        reward = np.ones(self.num_envs, dtype=np.float32)
        self.returns += reward
        infos = {}
        done = terminated | truncated
        if done.any():
            infos["episode_return"] = self.returns[done].copy()
            self.state[done] = self.rng.uniform(-0.05, 0.05, size=(int(done.sum()), 4))
            self.steps[done] = 0
            self.returns[done] = 0
        return self.state.astype(np.float32), reward, terminated, truncated, infos
