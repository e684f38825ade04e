"""paddle_xla"""
