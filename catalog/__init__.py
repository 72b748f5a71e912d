"""Facts from AWS documentation that the app builds on, each with its source."""
