from spotrun.state.models import Attempt, Base, ControllerLease, Event, Generation, Instance, Job, Setting
from spotrun.state.store import Store, add_event

__all__ = ["Attempt", "Base", "ControllerLease", "Event", "Generation", "Instance", "Job", "Setting", "Store", "add_event"]
