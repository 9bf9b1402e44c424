"""The writer subsystem of a client process: the engine, Reverb's writers, their factory."""
