import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
