"""Code that runs inside the Spark driver: sources, the streaming contract, the runner (`main(argv)`)."""
