"""One llama.cpp worker process: model, sampling, decode loop and the link to the dispatcher."""
