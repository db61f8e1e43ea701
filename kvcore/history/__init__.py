"""What a class's output lengths are, from any source: weighted samples (:mod:`.samples`), traces and their
streaming CSV reader (:mod:`.traces`, :mod:`.csvstream`), the Prometheus histogram layouts (:mod:`.series`),
buckets (:mod:`.buckets`), the placement of samples inside a bucket (:mod:`.bucket_model`), the binning bound
(:mod:`.bucket_bound`) and histories read from cumulative bucket counts (:mod:`.bucketed`).

Importing this package imports nothing else: :mod:`.series` is read by kvplan's vLLM stat logger, which must not
pull scipy into a serving image.
"""
