"""The OpenAI endpoints: parsing and validating requests, planning them, shaping responses and streams."""
