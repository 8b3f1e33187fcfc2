"""Prepares a moto S3 server (started with INITIAL_NO_AUTH_ACTION_COUNT=4, so that it
checks signatures and policies after four requests) for tests/it/objects.rs: an IAM user
allowed into bucket `data` only, a bucket `secret` it may not read, and the given files
uploaded into `data` under their base names (a directory, such as a Zarr store,
file by file under its name). Prints the user's key id and secret.

    python tests/s3_setup.py http://127.0.0.1:PORT FILE...
"""

import json
import os
import sys

import boto3


def main():
    ep = sys.argv[1]
    boot = dict(
        endpoint_url=ep,
        region_name="us-east-1",
        aws_access_key_id="bootstrap",
        aws_secret_access_key="bootstrap",
    )
    # the four unauthenticated requests
    iam = boto3.client("iam", **boot)
    iam.create_user(UserName="reader")
    key = iam.create_access_key(UserName="reader")["AccessKey"]
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "s3:*",
                "Resource": ["arn:aws:s3:::data", "arn:aws:s3:::data/*"],
            }
        ],
    }
    iam.put_user_policy(UserName="reader", PolicyName="data", PolicyDocument=json.dumps(policy))
    boto3.client("s3", **boot).create_bucket(Bucket="secret")
    # from here on, signed by the user
    s3 = boto3.client(
        "s3",
        endpoint_url=ep,
        region_name="us-east-1",
        aws_access_key_id=key["AccessKeyId"],
        aws_secret_access_key=key["SecretAccessKey"],
    )
    s3.create_bucket(Bucket="data")
    for f in sys.argv[2:]:
        base = os.path.basename(f.rstrip("/"))
        if os.path.isdir(f):
            # a Zarr store: each file under its path within the store
            for dirpath, _, names in os.walk(f):
                for n in names:
                    full = os.path.join(dirpath, n)
                    rel = os.path.relpath(full, f).replace(os.sep, "/")
                    s3.upload_file(full, "data", f"{base}/{rel}")
        else:
            s3.upload_file(f, "data", base)
    print(key["AccessKeyId"], key["SecretAccessKey"])


if __name__ == "__main__":
    main()
