"""Small training configs (override lists) that several test files train. One list per
program: tests that train the same list share its compiled programs through the compile
cache."""

# PPO on CartPole: 4 envs x 32 steps a tick, 4,096 steps, a log point (host call) per 1,024.
PPO_SMALL = ["env.num_envs=4", "pipeline.rollout_len=32", "agent.hidden_sizes=[16,16]",
             "train.total_steps=4096", "train.log_every=1024", "train.progress=false"]

# DQN on CartPole with prioritized replay and 3-step returns: 64 ticks of 16 steps; learning
# starts after 64 steps (tick 4), two updates a tick; the 256-slot replay is full by the end.
DQN_TINY = ["env.num_envs=4", "pipeline.rollout_len=4", "agent.hidden_sizes=[16]",
            "agent.n_step=3", "agent.updates_per_tick=2", "replay.capacity=256",
            "replay.batch_size=32", "replay.learning_starts=64",
            "agent.epsilon_decay_steps=512", "agent.target_update_every=4",
            "train.total_steps=1024", "train.log_every=256", "train.progress=false"]
