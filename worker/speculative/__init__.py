"""Speculative decoding: cheap drafts that the target model verifies several at a time.

The pure parts (n-gram drafting, adaptive draft length, the decode loop and its
sampling rule) have no llama.cpp in them and are tested against a fake model;
``chooser``, ``costs`` and ``setup`` connect them to the real one.
"""
