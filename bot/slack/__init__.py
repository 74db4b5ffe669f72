"""The Slack front end (docs/slack.md): slack_bolt's AsyncApp over Socket Mode or the Events API."""
