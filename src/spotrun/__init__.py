"""spotrun: train on spot instances without babysitting."""
