"""Videos of a trained agent: its evaluation episodes rendered per env family
(`renderers.py`), recorded inside the evaluation program (`record.py`; host envs:
`host.py`) and written with imageio (`writer.py`)."""

from jaxrl_async.video.command import record_video

__all__ = ["record_video"]
