"""The smoke probe Lambda function (handler.py): deployed from this directory as is, standard library only."""
