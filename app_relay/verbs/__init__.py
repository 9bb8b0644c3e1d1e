"""The two verbs in comments: parsing them, who may, applying dismiss and reinstate."""
