"""An in-process Dask cluster for the tests (needs ``distributed``)."""

from contextlib import contextmanager


@contextmanager
def local_dask_client(n_workers=1, threads_per_worker=2):
    """A ``distributed.Client`` on an in-process ``LocalCluster``.

    Workers are threads of this process talking over TCP on localhost, so
    task arguments and results are really serialised (as on a cluster) while
    the test stays fast; no dashboard.
    """
    import distributed

    with (
        distributed.LocalCluster(
            n_workers=n_workers,
            threads_per_worker=threads_per_worker,
            processes=False,
            protocol="tcp",
            host="127.0.0.1",
            dashboard_address=":0",
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client
