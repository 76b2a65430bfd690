"""One start, two frameworks: does towerkit's model compute what the Keras model computes?

Builds a model of the recipe with ``towerkit.layers`` in a plain session, copies its
initial weights into the Keras model of the same name, and trains both with Adam on the
same batches in the same order, printing both losses (and the test accuracies) as
they go. Where the two follow each other to float32 rounding for the first steps,
the layers and the optimizer compute the same thing, and whatever parts the two later
is rounding amplified by training, not a difference of the model or the recipe.

Usage::

    python examples/mnist1d/same_start.py [--model cnn] [--steps 6000] [--every 500]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mnist1d_recipe as rc


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model", default="cnn", choices=rc.MODELS)
    parser.add_argument("--data", default="plain", choices=rc.DATASETS)
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--every", type=int, default=500, help="steps between two printed lines")
    parser.add_argument("--seed", type=int, default=0, help="seeds the shared initial weights")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.every < 1:
        parser.error(f"--steps and --every must be >= 1; got {args.steps} and {args.every}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import mnist1d_keras
    import mnist1d_signals
    import mnist1d_towerkit
    import numpy as np
    import tensorflow as tf

    from towerkit.towers.compat import tf1

    split = mnist1d_signals.variant(mnist1d_signals.generate(), args.data)
    recipe = rc.Recipe()
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(args.seed)
        signal = tf1.placeholder(tf.float32, (None, 40))
        label = tf1.placeholder(tf.int32, (None,))
        logits = mnist1d_towerkit.BUILDERS[args.model](signal)
        loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits)
        )
        adam = tf1.train.AdamOptimizer(recipe.learning_rate, epsilon=recipe.epsilon)
        step_op = adam.minimize(loss)
        predicted = tf.argmax(logits, 1, output_type=tf.int32)
        accuracy = tf.reduce_mean(tf.cast(tf.equal(predicted, label), tf.float32))
        sess = tf1.Session(graph=graph)
        sess.run(tf1.global_variables_initializer())
        start = sess.run(tf1.trainable_variables())

    net = mnist1d_keras.build(args.model)
    shapes = [w.shape for w in net.get_weights()]
    sizes = [(a.size, int(np.prod(s))) for a, s in zip(start, shapes, strict=True)]
    if any(a != b for a, b in sizes):
        # The GRUs differ (TensorFlow 1's cell has one bias per gate, Keras's two).
        msg = f"{args.model}: the two models' weights differ in size ({sizes}): no shared start"
        raise SystemExit(msg)
    # A convolution's kernel is [1, k, in, out] in towerkit (Conv2D), [k, in, out] in Keras.
    net.set_weights([a.reshape(s) for a, s in zip(start, shapes, strict=True)])
    net.compile(
        optimizer=keras.optimizers.Adam(recipe.learning_rate, epsilon=recipe.epsilon),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    print(f"{args.model} on {args.data} data, one start (seed {args.seed}), the same batches")
    print("   step   towerkit loss   Keras loss   towerkit test %   Keras test %")
    for step in range(1, args.steps + 1):
        first = ((step - 1) * rc.BATCH_SIZE) % rc.TRAIN_SIZE
        xb, yb = split.x[first : first + rc.BATCH_SIZE], split.y[first : first + rc.BATCH_SIZE]
        ours, _ = sess.run([loss, step_op], {signal: xb, label: yb})
        theirs = float(net.train_on_batch(xb, yb)[0])
        if step <= 3 or step % args.every == 0:
            test = {signal: split.x_test, label: split.y_test}
            acc_ours = 100 * float(sess.run(accuracy, test))
            acc_theirs = 100 * float(
                net.evaluate(split.x_test, split.y_test, batch_size=1000, verbose=0)[1]
            )
            print(
                f"{step:7d}   {ours:13.6f}   {theirs:10.6f}   {acc_ours:15.1f}   {acc_theirs:12.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
