"""The model library: plain paddle.nn code a user could have written."""
