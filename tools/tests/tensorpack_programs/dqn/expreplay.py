"""Experience replay as tensorpack's DeepQNetwork has it: one object that is both the
DataFlow the trainer reads and a Callback that builds a predictor and fills the memory."""

import threading
from collections import namedtuple

import numpy as np

from tensorpack.callbacks.base import Callback
from tensorpack.utils import logger

__all__ = ['ExpReplay']

Experience = namedtuple('Experience', ['state', 'action', 'reward', 'isOver'])


class ReplayMemory(object):
    def __init__(self, max_size, state_shape, history_len, dtype='uint8'):
        self.max_size = int(max_size)
        self.state_shape = state_shape
        self.history_len = int(history_len)
        self.dtype = dtype
        self.state = np.zeros((self.max_size,) + state_shape, dtype=self.dtype)
        self.action = np.zeros((self.max_size,), dtype='int32')
        self.reward = np.zeros((self.max_size,), dtype='float32')
        self.isOver = np.zeros((self.max_size,), dtype='bool')
        self._curr_size = 0
        self._curr_pos = 0

    def append(self, exp):
        self.state[self._curr_pos] = exp.state
        self.action[self._curr_pos] = exp.action
        self.reward[self._curr_pos] = exp.reward
        self.isOver[self._curr_pos] = exp.isOver
        self._curr_pos = (self._curr_pos + 1) % self.max_size
        self._curr_size = min(self._curr_size + 1, self.max_size)

    def sample(self, idx):
        """history_len + 1 consecutive frames (the state and the next state), the move
        between them; frames of an earlier episode are blanked."""
        idx = (self._curr_pos + idx) % self._curr_size
        rows = [(idx + k) % self._curr_size for k in range(self.history_len + 1)]
        state = self.state[rows].copy()
        isOver = self.isOver[rows]
        for k in range(self.history_len - 2, -1, -1):
            if isOver[k]:
                state[:k + 1] = 0
                break
        state = np.moveaxis(state, 0, -1)
        last = rows[-2]
        return state, self.reward[last], self.action[last], self.isOver[last]

    def __len__(self):
        return self._curr_size


class EnvRunner(object):
    """Plays the environment epsilon-greedily and stores whole episodes in the memory."""

    def __init__(self, player, predictor, memory, history_len, seed):
        self.player = player
        self.num_actions = player.action_space.n
        self.predictor = predictor
        self.memory = memory
        self.history_len = history_len
        self._current_episode = []
        self._current_ob = player.reset()
        self._score = 0.0
        self.total_scores = []
        self.rng = np.random.RandomState(seed)

    def step(self, exploration):
        old_s = self._current_ob
        if self.rng.rand() <= exploration:
            act = self.rng.choice(range(self.num_actions))
        else:
            history = self.recent_state()
            history.append(old_s)
            history = np.expand_dims(np.stack(history, axis=-1), axis=0)
            q_values = self.predictor(history)[0][0]
            act = np.argmax(q_values)
        self._current_ob, reward, isOver, info = self.player.step(act)
        self._score += reward
        self._current_episode.append(Experience(old_s, act, reward, isOver))
        if isOver:
            self._current_ob = self.player.reset()
            self.total_scores.append(self._score)
            self._score = 0.0
            for exp in self._current_episode:
                self.memory.append(exp)
            self._current_episode.clear()

    def recent_state(self):
        expected_len = self.history_len - 1
        states = [k.state for k in self._current_episode[-expected_len:]] if expected_len else []
        zeros = np.zeros(self.memory.state_shape, dtype=self.memory.dtype)
        return [zeros] * (expected_len - len(states)) + states


class ExpReplay(Callback):
    """Batches sampled from the memory (a DataFlow's __iter__, endless); after each batch
    the player takes `update_frequency` more steps."""

    def __init__(self, predictor_io_names, get_player, state_shape, batch_size,
                 memory_size, init_memory_size, update_frequency, history_len,
                 state_dtype='uint8'):
        self.predictor_io_names = predictor_io_names
        self.get_player = get_player
        self.state_shape = state_shape
        self.batch_size = batch_size
        self.init_memory_size = int(init_memory_size)
        self.update_frequency = update_frequency
        self.history_len = history_len
        self.state_dtype = state_dtype
        self.exploration = 1.0
        self._init_memory_flag = threading.Event()
        self.mem = ReplayMemory(memory_size, state_shape, history_len, dtype=state_dtype)

    # DataFlow methods:
    def reset_state(self):
        self.rng = np.random.RandomState(0)

    def __iter__(self):
        self._init_memory_flag.wait()
        while True:
            idx = self.rng.randint(0, len(self.mem) - self.history_len - 1, size=self.batch_size)
            batch = [self.mem.sample(i) for i in idx]
            state = np.asarray([e[0] for e in batch], dtype=self.state_dtype)
            reward = np.asarray([e[1] for e in batch], dtype='float32')
            action = np.asarray([e[2] for e in batch], dtype='int8')
            isOver = np.asarray([e[3] for e in batch], dtype='bool')
            yield [state, action, reward, isOver]
            for _ in range(self.update_frequency):
                self.runner.step(self.exploration)

    # Callback methods:
    def _setup_graph(self):
        self.predictor = self.trainer.get_predictor(*self.predictor_io_names)

    def _before_train(self):
        self.runner = EnvRunner(self.get_player(), self.predictor, self.mem, self.history_len, 1)
        logger.info("Populating replay memory with epsilon={} ...".format(self.exploration))
        while len(self.mem) < self.init_memory_size:
            self.runner.step(self.exploration)
        self._init_memory_flag.set()

    def _trigger(self):
        scores, self.runner.total_scores = self.runner.total_scores, []
        if scores:
            self.trainer.monitors.put_scalar('expreplay/mean_score', np.mean(scores))
            self.trainer.monitors.put_scalar('expreplay/max_score', np.max(scores))
