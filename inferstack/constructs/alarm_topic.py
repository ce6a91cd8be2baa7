"""Where alarms go: the environment's existing SNS topic, or a new KMS-encrypted, TLS-only one."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct


class AlarmTopic(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        existing_topic_arn: str | None,
        emails: Sequence[str],
        key: kms.IKey,
    ) -> None:
        super().__init__(scope, construct_id)
        if existing_topic_arn:
            self.topic: sns.ITopic = sns.Topic.from_topic_arn(self, "Topic", existing_topic_arn)
        else:
            self.topic = sns.Topic(self, "Topic", display_name="inferstack alarms", master_key=key, enforce_ssl=True)
        for email in emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
