"""Pendulum-v1 (gym's dynamics) in numpy, one environment: the module sac_train.py and
td3_train.py import (gym is not installed here), as CleanRL's scripts share gym's."""
import numpy as np


class PendulumEnv:
    """Pendulum-v1 (gym's dynamics), one environment, truncated at 200 steps."""

    max_speed, max_torque, dt, g, m, l = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def _obs(self):
        th, thdot = self.state
        return np.array([[np.cos(th), np.sin(th), thdot]], dtype=np.float32)

    def reset(self):
        self.state, self.t = self.rng.uniform([-np.pi, -1.0], [np.pi, 1.0]), 0
        return self._obs(), {}

    def step(self, action):
        th, thdot = self.state
        u = float(np.clip(action[0, 0], -self.max_torque, self.max_torque))
        cost = ((th + np.pi) % (2 * np.pi) - np.pi) ** 2 + 0.1 * thdot ** 2 + 0.001 * u ** 2
        thdot = np.clip(thdot + (3 * self.g / (2 * self.l) * np.sin(th) + 3.0 / (self.m * self.l ** 2) * u) * self.dt,
                        -self.max_speed, self.max_speed)
        self.state, self.t = np.array([th + thdot * self.dt, thdot]), self.t + 1
        truncated = self.t >= 200
        obs = self._obs()
        if truncated:
            obs_next, _ = self.reset()
            return obs_next, np.array([-cost], dtype=np.float32), np.array([False]), np.array([True]), {"final_observation": obs}
        return obs, np.array([-cost], dtype=np.float32), np.array([False]), np.array([False]), {}
