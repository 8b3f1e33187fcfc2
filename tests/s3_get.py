"""Reads back what tilestream wrote to the moto S3 server of tests/it/objects.rs, as the
user the test set up (its key id and secret in AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY):

    python tests/s3_get.py ENDPOINT get BUCKET PREFIX DEST   # every key under PREFIX into DEST
    python tests/s3_get.py ENDPOINT keys BUCKET PREFIX       # the keys under PREFIX, a line each
    python tests/s3_get.py ENDPOINT uploads BUCKET           # open multipart uploads, a line each
    python tests/s3_get.py ENDPOINT put BUCKET KEY FILE      # FILE stored at KEY
"""

import os
import sys

import boto3


def main():
    ep, cmd, bucket = sys.argv[1], sys.argv[2], sys.argv[3]
    s3 = boto3.client("s3", endpoint_url=ep, region_name="us-east-1")
    if cmd == "uploads":
        for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
            print(u["Key"], u["UploadId"])
        return
    if cmd == "put":
        s3.upload_file(sys.argv[5], bucket, sys.argv[4])
        return
    prefix = sys.argv[4]
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    if cmd == "keys":
        for k in keys:
            print(k)
        return
    dest = sys.argv[5]
    for k in keys:
        rel = k[len(prefix):].lstrip("/") or os.path.basename(k)
        path = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        s3.download_file(bucket, k, path)


if __name__ == "__main__":
    main()
