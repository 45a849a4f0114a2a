"""The Spark session of a job: embedded defaults from conf/default.yaml, a master from the
command line (or spark-submit), and the kafka-segments source registered."""

from __future__ import annotations

import os
import shutil
import sys
from contextlib import contextmanager

from jobs import progress
from jobs.jvm_archive import OFF, Plan, plan, record_session, with_options

DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
SCHEDULER_POOL = "spark.scheduler.pool"  # Spark's local property naming a job's pool
ALLOCATION_FILE = "spark.scheduler.allocation.file"
STASH_POOL = "logreplay-stages"
FIRST_POOL = "logreplay-first"
# the pools of the FAIR scheduler (conf/default.yaml: spark.scheduler.mode) for the audit's
# intermediate stages (jobs.scan.Scratch.later), as (weight, minimum share): the first one's
# stages take every free core while they wait (Spark's fair ordering serves a pool under its
# minimum share first, and this one's is above any core count); the others share what is left
# with the output tables' writes (the default pool)
POOLS = {FIRST_POOL: (1, 1 << 20), STASH_POOL: (1, 0)}
# the driver JVM's option for C1 only (conf/default.yaml), left out for a row-heavy audit
# (:func:`full_jit`)
C1_ONLY = "-XX:TieredStopAtLevel=1"
DAEMON_MODULE = "spark.python.daemon.module"
PRELOAD_ENV = "LOGREPLAY_WORKER_PRELOAD"


def spark_session(
    master: str | None = None,
    app_name: str | None = None,
    conf: dict | None = None,
    source: bool = True,
    full_jit: bool = False,
):
    """getOrCreate a session. Under spark-submit the submitted master wins; in a plain Python
    process the configured master (embedded default: local mode) applies unless `master` is
    given. ``conf``: a validated configuration (replay.config.load). ``source``: register the
    `kafka-segments` source (a job that reads the dump through its own scan leaves it out:
    Spark's first registration of a Python data source starts a Python process that looks
    for installed sources, ~1.3 s on the driver's critical path). ``full_jit``: the driver
    JVM, if launched here, without :data:`C1_ONLY` (:func:`full_jit`)."""
    from pyspark.sql import SparkSession

    from replay.config import load

    conf = load(conf)["spark"]
    builder = SparkSession.builder.appName(app_name or conf["app_name"])
    submitted = (
        os.environ.get("SPARK_ENV_LOADED") == "1"
    )  # exported by spark-submit's launcher scripts
    if master or not submitted:
        master = master or conf["master"]
        builder = builder.master(master)
        if is_local(master):
            # A local-mode driver talks only to itself: bind it to loopback (not to whatever the
            # host name resolves to). A cluster driver must stay reachable by its executors, and
            # the user's own SPARK_LOCAL_IP always wins.
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    worker_python(None if submitted else master)
    config = {k: str(v) for k, v in (conf.get("config") or {}).items()}
    archive = _class_archive(submitted, master, app_name or conf["app_name"])
    preloaded = not submitted and is_local(master) and os.environ.get(PRELOAD_ENV, "on") not in OFF
    if preloaded:
        # the Python workers' daemon with the tasks' modules imported once (jobs.daemon); in
        # local mode only, where the executor's Python is this one and imports this project
        config.setdefault(DAEMON_MODULE, "jobs.daemon")
        # the one variable Spark SQL's Python tasks add to the workers' environment that an
        # RDD's do not: with it set for both, both ask for the same daemon (Spark keeps one
        # daemon per environment), which _context_with_workers starts early
        config.setdefault(SIMPLIFIED_TRACEBACK_ENV, "1")
    if full_jit and DRIVER_JAVA_OPTIONS in config:
        config[DRIVER_JAVA_OPTIONS] = without_option(config[DRIVER_JAVA_OPTIONS], C1_ONLY)
    if archive.options:
        config[DRIVER_JAVA_OPTIONS] = with_options(config.get(DRIVER_JAVA_OPTIONS), archive.options)
    with _allocations(config):
        for key, value in config.items():
            builder = builder.config(key, value)
        if preloaded and not _session_running() and not _connect_asked(config):
            _context_with_workers(app_name or conf["app_name"], master, config)
        spark = builder.getOrCreate()
    record_session(archive, spark)
    progress.watch(spark)
    spark.sparkContext.setLogLevel("WARN")
    if source:
        from decoders.spark import register

        register(spark)
    return spark


WORKERS_JOB = "logreplay: start the Python workers"
# set by Spark SQL's Python runners (spark.sql.execution.pyspark.udf.simplifiedTraceback)
SIMPLIFIED_TRACEBACK_ENV = "spark.executorEnv.SPARK_SIMPLIFIED_TRACEBACK"


def _context_with_workers(app_name: str, master: str, config: dict[str, str]) -> None:
    """The session's SparkContext, made here with the settings the builder would give it
    (the builder then finds it), and the Python workers' daemon started at once by a one-task
    job from a thread of its own.

    Why: the daemon's imports and numba's kernels (jobs.daemon: 1.5-2.5 s) are otherwise paid
    when the first task that runs Python asks for a worker, the scan's, on the critical path
    of every small run; the driver spends about as long between the context's start and the
    scan's submission (the session's own start in the JVM, the dump's layout, the plan), so
    here the two overlap. The job's failure changes nothing: the scan's tasks would start the
    daemon as before (and meet the same error, reported there)."""
    import threading

    from pyspark import SparkConf, SparkContext

    settings = {"spark.app.name": app_name, "spark.master": master, **config}
    sc = SparkContext.getOrCreate(SparkConf().setAll(list(settings.items())))

    def start() -> None:
        try:
            sc.setJobGroup(WORKERS_JOB, WORKERS_JOB)
            sc.parallelize([0], 1).foreachPartition(_nothing)
        except Exception:  # noqa: S110 (stopped, or the daemon failed: the tasks say so)
            pass

    threading.Thread(target=start, name="logreplay-workers", daemon=True).start()


def _connect_asked(config: dict[str, str]) -> bool:
    """Whether the builder will make a Spark Connect session instead of a classic one (a
    remote named in the environment or the settings, or Connect as the API mode): it refuses
    to where a classic context runs already, so none is made first."""
    return (
        "SPARK_REMOTE" in os.environ
        or "spark.remote" in config
        or config.get("spark.api.mode", "").lower() == "connect"
    )


def _nothing(rows) -> None:
    """A task that only needs a Python worker to exist."""
    for _ in rows:
        pass


# Spark SQL's settings under which a query is interpreted rather than compiled to Java: no
# whole-stage code, and every projection, predicate and ordering by Spark's interpreted
# implementation (the fallback Spark itself uses when its generated code fails to compile)
INTERPRETED = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


@contextmanager
def interpreted_if_small(spark, conf):
    """A job's block whose queries, once it is told they run over few rows (``small(True)``:
    replay.plan.Audit.single, a small dump's stages after the scan), are interpreted
    (:data:`INTERPRETED`); the session's settings as they were after the block.

    Why: Spark compiles each query's stages and expressions to Java classes with Janino. The
    demo's audit with its gate and report compiled ~370 classes (5-6 s of the driver JVM's
    CPU, a quarter of it) to run over a few hundred rows, which its interpreted operators run
    in milliseconds; the demo's run ended 2.5-3 s sooner (docs/benchmarks.md). A large dump's
    stages keep Spark's compiled code, whose cost its rows repay. A setting the job's
    configuration (``conf``: spark.config) gives stays as given."""
    given = conf["spark"].get("config") or {}
    wanted = {k: v for k, v in INTERPRETED.items() if k not in given}
    before: dict[str, str | None] = {}

    def small(single: bool) -> None:
        if not single or before:
            return
        for key, value in wanted.items():
            before[key] = spark.conf.get(key, None)
            spark.conf.set(key, value)

    try:
        yield small
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@contextmanager
def _allocations(config: dict[str, str]):
    """Under the FAIR scheduler without the user's own allocation file: :data:`POOLS` in a
    file of their own for the block (Spark reads it once, as its context starts)."""
    if config.get("spark.scheduler.mode", "").upper() != "FAIR" or ALLOCATION_FILE in config:
        yield
        return
    import tempfile

    pools = "".join(
        f'<pool name="{name}"><schedulingMode>FIFO</schedulingMode><weight>{weight}</weight>'
        f"<minShare>{share}</minShare></pool>"
        for name, (weight, share) in POOLS.items()
    )
    with tempfile.TemporaryDirectory(prefix="logreplay-") as tmp:
        path = os.path.join(tmp, "pools.xml")
        with open(path, "w") as f:
            f.write(f'<?xml version="1.0"?><allocations>{pools}</allocations>')
        config[ALLOCATION_FILE] = path
        try:
            yield
        finally:
            del config[ALLOCATION_FILE]


def _class_archive(submitted: bool, master: str | None, job: str) -> Plan:
    """The driver JVM's class-data archive (jobs.jvm_archive), when this call launches the
    JVM: not under spark-submit, not for a Spark Connect remote, not when a session runs."""
    if submitted or (master or "").startswith("sc://") or _session_running():
        return Plan()
    return plan(job=job)


def _session_running() -> bool:
    """Whether this process runs a Spark session already (PySpark's active session of this
    thread, else its default one), whose JVM the builder will reuse. A bare SparkContext
    without a session is not seen: its JVM ignores the options, and a claim recorded from it
    is dropped once that JVM has exited without writing an archive."""
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    try:
        SparkSession.active()
    except PySparkException:  # NO_ACTIVE_OR_DEFAULT_SESSION
        return False
    return True


def worker_python(master: str | None) -> None:
    """The interpreter Spark starts the Python workers with (``PYSPARK_PYTHON``, read as the
    context starts): the workers must import this project, at this version. Where they run on
    this machine (a local ``master`` this process starts), that is this interpreter, whatever
    the environment says: a ``PYSPARK_PYTHON`` exported for a cluster's executors (a shell
    profile, a platform's setup) names a Python that lacks logreplay here, or holds another
    version of it, and the scan's first task failed with a JVM stack. Elsewhere (a cluster's
    master, ``spark-submit``) the environment's choice stands, else this interpreter."""
    if master is None or not is_local(master):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        return
    given = os.environ.get("PYSPARK_PYTHON")
    if given and os.path.abspath(shutil.which(given) or given) != os.path.abspath(sys.executable):
        print(f"logreplay: local mode runs its Python workers with {sys.executable}, not "
              f"PYSPARK_PYTHON={given} (the executors' Python of a cluster)", file=sys.stderr)  # fmt: skip
    os.environ["PYSPARK_PYTHON"] = sys.executable


def is_local(master: str) -> bool:
    """Whether a master URL runs the whole application in this machine's JVMs: `local`,
    `local[N]`, `local[*]`, `local[N,F]` (Spark's local mode) and `local-cluster[...]`."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def add_job_arguments(p, conf: bool = True, run: bool = True) -> None:
    """The arguments every Spark job takes, the same under `logreplay` and `spark-submit`
    (``run``: the run's id and logical date, for jobs that commit a run)."""
    if conf:
        p.add_argument("--conf", default=None, help="YAML file laid over conf/default.yaml")
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="override one key, e.g. --set audit.clock_tolerance_ms=500 (repeatable)",
        )
    p.add_argument("--master", default=None, help="Spark master (default: local mode)")
    if not run:
        return
    p.add_argument(
        "--run-id", default=None, help="the run's id, e.g. Airflow's {{ run_id }}: a rerun replaces"
    )
    p.add_argument(
        "--logical-date", default=None, help="the data interval's date, e.g. Airflow's {{ ds }}"
    )


def full_jit(conf, found) -> bool:
    """Whether an audit's driver JVM runs full tiered compilation: where the dump's internal
    topics' log segments hold at least ``spark.full_jit_from_mb`` MiB (``found``: the dump's
    walk, decoders.layout.walked, their names and sizes). Their records are what the audit's
    Spark stages carry rows of (a coordinator transaction, a commit, their markers): C1's
    code runs them slower than C2's, ~4.5 CPU seconds per GB of those topics, and C2's
    compiling costs ~10 CPU seconds more than C1's on any audit: C2 pays from ~3 GB on
    (docs/benchmarks.md)."""
    from decoders.layout import internal_log_bytes

    return internal_log_bytes(found) >= conf["spark"]["full_jit_from_mb"] << 20


def without_option(options: str, option: str) -> str:
    """JVM ``options`` (space-separated) without ``option``."""
    return " ".join(o for o in options.split() if o != option)


def job_conf(args):
    """The configuration of a job's arguments, loaded and validated once for the whole run
    (a replay.config.RunConfig; raises replay.config.ConfigError)."""
    from replay.config import load

    return load(getattr(args, "conf", None), getattr(args, "set", None) or ())


class DumpListing:
    """A dump's listing (decoders.layout.dump_layout) made in a thread while the job's Spark
    session starts: the driver JVM's start leaves the driver's Python waiting ~1.5 s, and a
    dump of 10,000 partitions takes ~0.8 s to walk and lay out (60,000 files; its
    `partition.metadata` files read). The walk comes first (:meth:`walked`: what the
    session's options are chosen by, :func:`full_jit`), then the layout and whatever the job
    derives from it (``then``), in the same thread."""

    def __init__(self, job: str, inputs: list[str], then=None) -> None:
        import threading

        from decoders.layout import laid_out, walked

        self.job, self.inputs = job, inputs
        self._walked = self._listed = self._derived = self._failed = None
        self._walk_done = threading.Event()

        def work() -> None:
            try:
                self._walked = walked(inputs)
                self._walk_done.set()
                self._listed = laid_out(self._walked)
                if then is not None and self._listed[0]:
                    self._derived = then(self._listed)
            except BaseException as e:  # noqa: BLE001 - raised again in the job's thread
                self._failed = e
            finally:
                self._walk_done.set()

        self._thread = threading.Thread(target=work, name="logreplay-listing", daemon=True)
        self._thread.start()

    @classmethod
    def started(cls, job: str, inputs: list[str], then=None, conf=None
                ) -> DumpListing | None:  # fmt: skip
        """The listing of ``inputs`` under way; None, said on stderr, when a local root does
        not exist. ``conf``: the run's configuration, whose storage settings are exported
        first (jobs.output.prepare_storage: a dump on S3 is listed as the tasks read it)."""
        missing = [p for p in inputs if "://" not in p and not os.path.exists(p)]
        if missing:
            print(f"logreplay {job}: no such path: {', '.join(missing)}", file=sys.stderr)
            return None
        if conf is not None:
            from jobs.output import prepare_storage

            prepare_storage(conf)
        return cls(job, inputs, then)

    def walked(self):
        """Every root's files with their sizes (decoders.layout.walked), once walked."""
        self._walk_done.wait()
        self._raise()
        return self._walked

    def result(self):
        """(files, layout) of decoders.layout.dump_layout, or None, said on stderr, when no
        Kafka file is there."""
        self._thread.join()
        self._raise()
        if not self._listed[0]:
            inputs = ", ".join(self.inputs)
            print(f"logreplay {self.job}: no Kafka files under {inputs}", file=sys.stderr)
            return None
        return self._listed

    def derived(self):
        """What ``then`` made of the listing (None where there was no Kafka file)."""
        self._thread.join()
        self._raise()
        return self._derived

    def _raise(self) -> None:
        if self._failed is not None:
            raise self._failed
