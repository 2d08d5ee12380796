"""WORKFLOW.md to frozen settings: the workflow file, the settings sections, the stage model,
prices and the prompt template.
"""
