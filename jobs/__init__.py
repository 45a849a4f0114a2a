"""Entry points: the `logreplay` command line and spark-submit-able job modules."""
