"""The test queues of a run's sharded jobs: one small Ray actor per run, and the client a twin's
device job pulls through.

The actor holds one `sharding.WorkSteal` per sharded job (keyed by the job's index in the run)
and is its only writer: Ray runs an actor's calls one at a time, so a pull and a steal never
interleave. It asks for no CPU and is pinned to the head node (``node:__internal_head__``, a
resource Ray gives the head only), so it is not on a device node that may die mid-run. It lives
as long as the driver that made it (not detached), named per run so a device job can find it
by name: everything that crosses to it is strings and lists of strings.
"""

from __future__ import annotations

from farm.runner.sharding import WorkSteal

HEAD_RESOURCE = "node:__internal_head__"
CALL_S = 30.0  # deadline on every call to the actor (FACTS: Ray waits forever otherwise)


class ShardQueues:
    """The actor's body: plain methods over each sharded job's policy (made on first use)."""

    def __init__(self) -> None:
        self.jobs: dict[str, WorkSteal] = {}

    def _job(self, job: str) -> WorkSteal:
        return self.jobs.setdefault(job, WorkSteal([]))

    def add_node(self, job: str, shard: str) -> None:
        self._job(job).add_node(shard)

    def register(self, job: str, shard: str, collected: list[str]) -> None:
        self._job(job).register(shard, collected)

    def next(self, job: str, shard: str) -> str | None:
        return self._job(job).next(shard)

    def remove_node(self, job: str, shard: str, done: list[str]) -> int:
        return self._job(job).remove_node(shard, done)

    def state(self, job: str) -> dict:
        return self._job(job).state()


def start(name: str):
    """The run's queue actor (driver side); ``ray.kill`` it when the run ends."""
    import ray

    cls = ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)(ShardQueues)
    return cls.options(name=name, resources={HEAD_RESOURCE: 0.001}).remote()


def call(method, *args):
    """One call to the actor, with a deadline."""
    import ray

    return ray.get(method.remote(*args), timeout=CALL_S)


class Client:
    """A twin's view of its job's queue (device side, inside the Ray task)."""

    def __init__(self, spec: dict):
        import ray

        self.job, self.shard = str(spec["job"]), str(spec["name"])
        self.actor = ray.get_actor(spec["queue"])

    def register(self, collected: list[str]) -> None:
        call(self.actor.register, self.job, self.shard, collected)

    def next(self) -> str | None:
        return call(self.actor.next, self.job, self.shard)
