"""Project tools run from the checkout (not shipped in the images)."""
