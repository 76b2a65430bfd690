"""The idioms of tensorpack's DeepQNetwork on a grid world of its own: an experience
replay that is a DataFlow and a Callback, a target network refreshed by RunOp every k
steps, exploration annealed through ObjAttrParam, an evaluator callback on a predictor."""

import argparse
import os

import numpy as np
import tensorflow as tf

from tensorpack import *

from DQNModel import Model as DQNModel
from expreplay import ExpReplay

BATCH_SIZE = 16
IMAGE_SIZE = (4, 4)
FRAME_HISTORY = 2
UPDATE_FREQ = 2
MEMORY_SIZE = 400
INIT_MEMORY_SIZE = 60
STEPS_PER_EPOCH = 25


class ActionSpace(object):
    def __init__(self, n, rng):
        self.n, self.rng = n, rng

    def sample(self):
        return self.rng.randint(self.n)


class GridWorld(object):
    """An environment of its own: reach the bottom-right cell of a 4x4 grid.

    The observation is a uint8 image (the player at 255, the goal at 128); a move costs
    0.05, the goal gives 1 and ends the episode, as does the 12th move."""

    moves = [(-1, 0), (1, 0), (0, -1), (0, 1)]

    def __init__(self, seed=0):
        self.rng = np.random.RandomState(seed)
        self.action_space = ActionSpace(len(self.moves), self.rng)

    def observe(self):
        ob = np.zeros(IMAGE_SIZE, np.uint8)
        ob[-1, -1] = 128
        ob[self.pos] = 255
        return ob

    def reset(self):
        self.pos = (self.rng.randint(3), self.rng.randint(3))
        self.steps = 0
        return self.observe()

    def step(self, act):
        dy, dx = self.moves[act]
        self.pos = (min(max(self.pos[0] + dy, 0), 3), min(max(self.pos[1] + dx, 0), 3))
        self.steps += 1
        done = self.pos == (3, 3)
        return self.observe(), 1.0 if done else -0.05, done or self.steps >= 12, {}


def get_player(train=False):
    return GridWorld(seed=1 if train else 2)


def play_one_episode(env, func):
    ob = env.reset()
    history = [np.zeros_like(ob)] * (FRAME_HISTORY - 1) + [ob]
    score = 0.0
    while True:
        act = func(np.stack(history[-FRAME_HISTORY:], axis=-1)[None])[0][0].argmax()
        ob, r, isOver, info = env.step(act)
        history.append(ob)
        score += r
        if isOver:
            return score


class Evaluator(Callback):
    def __init__(self, nr_eval, input_names, output_names, get_player_fn):
        self.eval_episode = nr_eval
        self.input_names = input_names
        self.output_names = output_names
        self.get_player_fn = get_player_fn

    def _setup_graph(self):
        self.pred_func = self.trainer.get_predictor(self.input_names, self.output_names)

    def _trigger(self):
        player = self.get_player_fn()
        scores = [play_one_episode(player, self.pred_func) for _ in range(self.eval_episode)]
        self.trainer.monitors.put_scalar('mean_score', np.mean(scores))
        self.trainer.monitors.put_scalar('max_score', np.max(scores))


class Model(DQNModel):
    def _get_DQN_prediction(self, image):
        image = image / 255.0
        with argscope(Conv2D, activation=lambda x: PReLU('prelu', x), use_bias=True):
            l = (LinearWrap(image)
                 .Conv2D('conv0', 8, 3)
                 .FullyConnected('fc0', 32)
                 .tf.nn.leaky_relu(alpha=0.01)())
        if self.method != 'Dueling':
            Q = FullyConnected('fct', l, self.num_actions)
        else:
            V = FullyConnected('fctV', l, 1)
            As = FullyConnected('fctA', l, self.num_actions)
            Q = tf.add(As, V - tf.reduce_mean(As, 1, keep_dims=True))
        return tf.identity(Q, name='Qvalue')


def get_config(model):
    expreplay = ExpReplay(
        predictor_io_names=(['state'], ['Qvalue']),
        get_player=lambda: get_player(train=True),
        state_shape=model.state_shape,
        batch_size=BATCH_SIZE,
        memory_size=MEMORY_SIZE,
        init_memory_size=INIT_MEMORY_SIZE,
        update_frequency=UPDATE_FREQ,
        history_len=FRAME_HISTORY,
        state_dtype=model.state_dtype.as_numpy_dtype
    )
    return TrainConfig(
        data=QueueInput(expreplay),
        model=model,
        callbacks=[
            ModelSaver(),
            PeriodicTrigger(RunOp(DQNModel.update_target_param, verbose=True),
                            every_k_steps=10),
            expreplay,
            ScheduledHyperParamSetter('learning_rate', [(0, 1e-2), (1, 5e-3)]),
            ScheduledHyperParamSetter(ObjAttrParam(expreplay, 'exploration'),
                                      [(0, 1), (2, 0.2)], interp='linear'),
            PeriodicTrigger(Evaluator(3, ['state'], ['Qvalue'], get_player), every_k_epochs=1),
        ],
        steps_per_epoch=STEPS_PER_EPOCH,
        max_epoch=2,
    )


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--load', help='load model')
    parser.add_argument('--task', choices=['play', 'train'], default='train')
    parser.add_argument('--algo', choices=['DQN', 'Double', 'Dueling'], default='Double')
    args = parser.parse_args()

    num_actions = get_player().action_space.n
    logger.info("Num Actions: {}".format(num_actions))
    model = Model(IMAGE_SIZE, FRAME_HISTORY, args.algo, num_actions)

    if args.task != 'train':
        assert args.load is not None
        pred = OfflinePredictor(PredictConfig(
            model=model,
            session_init=SmartInit(args.load),
            input_names=['state'],
            output_names=['Qvalue']))
        scores = [play_one_episode(get_player(), pred) for _ in range(5)]
        print('played', len(scores), 'episodes, best score', max(scores))
    else:
        logger.set_logger_dir(os.path.join('train_log', 'DQN-{}'.format(args.algo)))
        config = get_config(model)
        config.session_init = SmartInit(args.load)
        launch_train_with_config(config, SimpleTrainer())
