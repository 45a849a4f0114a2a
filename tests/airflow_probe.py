"""Run by tests/test_airflow.py with the Airflow environment's interpreter: load the example DAG
with Airflow's own DagBag and print its shape and rendered arguments as JSON."""

import json
import sys

try:
    from airflow.dag_processing.dagbag import DagBag
except ImportError:  # Airflow before 3.1
    from airflow.models.dagbag import DagBag

folder, ds, run_id, overrides = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
bag = DagBag(dag_folder=folder)
out = {"import_errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": {}}
for dag_id, dag in bag.dags.items():
    tasks = {}
    for task in dag.tasks:
        context = {
            "ds": ds,
            "ds_nodash": ds.replace("-", ""),
            "run_id": run_id,
            "params": {**{k: dag.params[k] for k in dag.params}, **overrides},
        }
        tasks[task.task_id] = {
            "operator": type(task).__name__,
            "upstream": sorted(task.upstream_task_ids),
            "application": task.render_template(task.application, context),
            "application_args": task.render_template(task.application_args, context),
            "name": task.render_template(task.name, context),
            "py_files": task.render_template(task.py_files, context),
            "retries": task.retries,
            "template_fields": list(task.template_fields),
        }
    out["dags"][dag_id] = {
        "schedule": str(getattr(dag, "schedule", None) or dag.timetable),
        "catchup": dag.catchup,
        "max_active_runs": dag.max_active_runs,
        "tasks": tasks,
    }
print(json.dumps(out))
