"""Watching a trained agent: its evaluation (`evaluate.py`: the run's latest checkpoint on
envs of its own, periodically while training or by `jaxrl-async eval`) and videos of it,
rendered per env family (`renderers.py`), recorded inside the evaluation program
(`record.py`; host envs: `host_video.py`, `periodic.py` while training) and written with
imageio (`writer.py`); `video.py` is `eval --video`."""

from jaxrl_async.evaluation.video import record_video

__all__ = ["record_video"]
