"""What runs after training: using a trained model on new molecules (explanations of
predictions, :mod:`graphormer_urpe.inference.explain`)."""
