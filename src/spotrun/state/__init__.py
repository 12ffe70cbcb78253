from spotrun.state.models import Attempt, Base, ControllerLease, Event, Generation, Instance, Job, LogChunk, Setting
from spotrun.state.store import Store, StoreUnavailable, add_event

__all__ = [
    "Attempt", "Base", "ControllerLease", "Event", "Generation", "Instance", "Job", "LogChunk", "Setting", "Store",
    "StoreUnavailable", "add_event",
]
