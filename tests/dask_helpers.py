"""A local Dask cluster for the tests (needs ``distributed``)."""

from contextlib import contextmanager


@contextmanager
def local_dask_client(n_workers=1, threads_per_worker=2, processes=False):
    """A ``distributed.Client`` on a ``LocalCluster`` on the loopback interface.

    By default the workers are threads of this process talking over TCP, so
    task arguments and results are really serialised (as on a cluster) while
    the test stays fast; with ``processes=True`` every worker is a process of
    its own under a nanny (which restarts it when it dies).  No dashboard.
    """
    import distributed

    with (
        distributed.LocalCluster(
            n_workers=n_workers,
            threads_per_worker=threads_per_worker,
            processes=processes,
            protocol="tcp",
            host="127.0.0.1",
            dashboard_address=":0",
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client
