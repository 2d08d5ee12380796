"""The leaf vocabulary every layer speaks: errors, the normalized Issue, tool specs. It imports
nothing of symphony.
"""
