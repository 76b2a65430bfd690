"""The job scripts here run as programs in their own processes: pytest does not import them."""

collect_ignore = [
    "dist_job.py",
    "dist_eval_job.py",
    "hvd_job.py",
    "hvd_elastic_job.py",
    "hvd_eval_job.py",
]
