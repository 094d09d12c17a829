"""One module per verifier, each named after the verifier it registers (``compass.gym.registry``).

Every module here is imported when the registry is first looked up, so add a verifier by adding
its module; nothing else lists them.
"""
