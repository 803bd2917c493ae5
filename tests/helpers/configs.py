"""Small training configs (override lists) that several test files train. One list per
program: tests that train the same list share its compiled programs through the compile
cache."""

# PPO on CartPole: 4 envs x 32 steps a tick, 4,096 steps, a log point (host call) per 1,024.
PPO_SMALL = [
    "env.num_envs=4",
    "pipeline.rollout_len=32",
    "agent.hidden_sizes=[16,16]",
    "train.total_steps=4096",
    "train.log_every=1024",
    "train.progress=false",
]

# DQN on CartPole with prioritized replay and 3-step returns: 64 ticks of 16 steps; learning
# starts after 64 steps (tick 4), two updates a tick; the 256-slot replay is full by the end.
DQN_TINY = [
    "env.num_envs=4",
    "pipeline.rollout_len=4",
    "agent.hidden_sizes=[16]",
    "agent.n_step=3",
    "agent.updates_per_tick=2",
    "replay.capacity=256",
    "replay.batch_size=32",
    "replay.learning_starts=64",
    "agent.epsilon_decay_steps=512",
    "agent.target_update_every=4",
    "train.total_steps=1024",
    "train.log_every=256",
    "train.progress=false",
]

# PQN on CartPole: 4 envs x 16 steps a tick, 16 updates, a log point every 4.
PQN_TINY = [
    "env.num_envs=4",
    "pipeline.rollout_len=16",
    "agent.hidden_sizes=[8]",
    "agent.num_minibatches=2",
    "agent.num_epochs=2",
    "agent.epsilon_decay_steps=512",
    "train.total_steps=1024",
    "train.log_every=256",
    "train.progress=false",
]
# PQN_TINY at lag 1 with 8 envs (8 updates of 128 steps), threefry keys.
PQN_LAG1 = PQN_TINY + ["env.num_envs=8", "pipeline.lag=1", "train.prng=threefry2x32"]

# R2D2 on masked CartPole at lag 1: 4 envs x 8 steps a tick, two sequences of 8 per env per
# tick, two updates a tick from the 5th tick on (128 steps); 1,536 steps, 3 log points.
R2D2_TINY = [
    "env.num_envs=4",
    "pipeline.rollout_len=8",
    "agent.sequence_length=8",
    "agent.sequence_overlap=4",
    "agent.burn_in=2",
    "agent.hidden_sizes=[8]",
    "agent.memory_size=8",
    "agent.updates_per_tick=2",
    "replay.capacity=256",
    "replay.batch_size=8",
    "replay.learning_starts=128",
    "train.total_steps=1536",
    "train.log_every=512",
    "train.progress=false",
    "pipeline.lag=1",
]

# A sweep's runs: PPO on CartPole, 4 envs x 16 steps, 8 updates, a log point every 2, two
# seeds a point; SWEEP_GRID's 2 x 2 points share one program (test_sweep, test_tracking).
PPO_SWEEP_TINY = [
    "env.num_envs=4",
    "pipeline.rollout_len=16",
    "agent.hidden_sizes=[8]",
    "agent.num_minibatches=2",
    "train.total_steps=512",
    "train.log_every=128",
    "train.num_seeds=2",
    "train.progress=false",
]
SWEEP_GRID = {"agent.learning_rate": [0.0, 0.003], "agent.ent_coef": [0.0, 0.01]}
